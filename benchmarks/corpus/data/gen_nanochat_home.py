"""Write a small offline home folder for a nanochat-style pretraining run.

Our own generator for the torchdoctor benchmark corpus.  The trainer it
serves reads three things from its base folder (the NANOCHAT_BASE_DIR
environment variable): a pickled tiktoken Encoding at tokenizer/tokenizer.pkl,
a per-token byte-length tensor at tokenizer/token_bytes.pt, and parquet shards
with a `text` column (the last shard is the validation split).  Upstream they
come from a download and a tokenizer-training script; here everything is made
from synthetic text:

* documents of random words drawn from a Zipf-weighted made-up vocabulary;
* a byte-level BPE vocabulary learnt on those documents by a few lines of our
  own pair counting (256 byte tokens + merges), plus the special token names
  the trainer looks up;
* two parquet shards (train, val) of a few hundred short documents each.

Needs tiktoken and pyarrow (installed into benchmarks/corpus/.deps by the
corpus's --install-deps); that folder is put on sys.path here.  Deterministic.
"""
import argparse
import collections
import os
import pickle
import random
import sys

CORPUS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(CORPUS, ".deps"))

# The names the trainer asks the tokenizer for (identifiers, not text).
SPECIALS = ["<|bos|>", "<|user_start|>", "<|user_end|>", "<|assistant_start|>",
            "<|assistant_end|>", "<|python_start|>", "<|python_end|>",
            "<|output_start|>", "<|output_end|>"]
# Our own pre-tokenisation: optional leading space + letters, digits, other.
PATTERN = r""" ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+"""


def make_docs(rng, n_docs, vocab, weights):
    docs = []
    for _ in range(n_docs):
        n = rng.randint(4, 40)
        words = rng.choices(vocab, weights=weights, k=n)
        docs.append(" ".join(words).capitalize() + ".")
    return docs


def learn_merges(docs, n_merges):
    """Plain byte-pair merging over space-prefixed words: returns {bytes: rank}."""
    ranks = {bytes([i]): i for i in range(256)}
    counts = collections.Counter()
    for doc in docs:
        for i, word in enumerate(doc.split(" ")):
            counts[(" " if i else "") + word] += 1
    words = {tuple(bytes([b]) for b in w.encode()): c for w, c in counts.items()}
    for _ in range(n_merges):
        pairs = collections.Counter()
        for parts, c in words.items():
            for a, b in zip(parts, parts[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        new = a + b
        if new in ranks:
            break
        ranks[new] = len(ranks)
        merged = {}
        for parts, c in words.items():
            out, i = [], 0
            while i < len(parts):
                if i + 1 < len(parts) and parts[i] == a and parts[i + 1] == b:
                    out.append(new)
                    i += 2
                else:
                    out.append(parts[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + c
        words = merged
    return ranks


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True, help="the base folder to write")
    ap.add_argument("--vocab-size", type=int, default=512, help="tokens including the special ones")
    ap.add_argument("--train-docs", type=int, default=1200)
    ap.add_argument("--val-docs", type=int, default=300)
    ap.add_argument("--row-group", type=int, default=300, help="documents per parquet row group")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import pyarrow as pa
    import pyarrow.parquet as pq
    import tiktoken
    import torch

    rng = random.Random(args.seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = sorted({"".join(rng.choice(letters) for _ in range(rng.randint(2, 8))) for _ in range(400)})
    weights = [1.0 / (rank + 1) for rank in range(len(vocab))]
    train = make_docs(rng, args.train_docs, vocab, weights)
    val = make_docs(rng, args.val_docs, vocab, weights)

    ranks = learn_merges(train, args.vocab_size - len(SPECIALS) - 256)
    specials = {name: len(ranks) + i for i, name in enumerate(SPECIALS)}
    enc = tiktoken.Encoding(name="corpus-synthetic", pat_str=PATTERN,
                            mergeable_ranks=ranks, special_tokens=specials)

    tok_dir = os.path.join(args.out, "tokenizer")
    os.makedirs(tok_dir, exist_ok=True)
    with open(os.path.join(tok_dir, "tokenizer.pkl"), "wb") as f:
        pickle.dump(enc, f)
    lengths = [0 if i in specials.values() else len(enc.decode_single_token_bytes(i))
               for i in range(enc.n_vocab)]
    torch.save(torch.tensor(lengths, dtype=torch.int32), os.path.join(tok_dir, "token_bytes.pt"))

    data_dir = os.path.join(args.out, "base_data_climbmix")
    os.makedirs(data_dir, exist_ok=True)
    for old in os.listdir(data_dir):
        if old.endswith(".parquet"):
            os.remove(os.path.join(data_dir, old))
    for index, docs in enumerate((train, val)):
        table = pa.table({"text": docs})
        pq.write_table(table, os.path.join(data_dir, f"shard_{index:05d}.parquet"),
                       row_group_size=args.row_group)
    print(f"wrote a {enc.n_vocab}-token tokenizer and {len(train)}+{len(val)} documents to {args.out}")


if __name__ == "__main__":
    main()
