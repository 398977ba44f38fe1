"""Write a tokenizer folder and plain-text shards for a litgpt-style pretraining run.

Our own generator for the torchdoctor benchmark corpus.  The trainer it serves
takes a folder of .txt files (the first file, in sorted order, becomes the
validation split) and a tokenizer folder holding a Hugging Face `tokenizer.json`
and a `tokenizer_config.json` that names the BOS/EOS tokens.  Upstream both
come from a download; here a small byte-level BPE tokenizer is trained with the
`tokenizers` library on synthetic text of random words (a Zipf-weighted made-up
vocabulary), and the same kind of text is written as shards.

The trainer turns the text into litdata token chunks (`train/`, `val/` inside
the text folder) on its first run only, and prints different lines when it
finds them already there.  So that every run, plain or measured, sees the same
state, this generator writes those chunks itself, with litdata's `optimize`
and our own encoding function (BOS + the tokenizer's ids, int32, one item per
file), for the block size given by --block-size (the run's max_seq_length + 1).
Needs litdata from benchmarks/corpus/.deps (put on sys.path here).
Deterministic.
"""
import argparse
import json
import os
import random
import shutil
import sys
from functools import partial

CORPUS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(CORPUS, ".deps"))


def make_text(rng, n_lines, vocab, weights):
    lines = []
    for _ in range(n_lines):
        words = rng.choices(vocab, weights=weights, k=rng.randint(5, 25))
        lines.append(" ".join(words).capitalize() + ".")
    return "\n".join(lines) + "\n"


def encode_file(filename, tokenizer_file, bos_token):
    """One item per text file: BOS followed by the file's token ids."""
    import torch
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer_file)
    with open(filename, encoding="utf-8") as f:
        ids = tok.encode(f.read().strip()).ids
    yield torch.tensor([tok.token_to_id(bos_token)] + ids, dtype=torch.int)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True, help="folder to write (tokenizer/ and text/ inside)")
    ap.add_argument("--shards", type=int, default=3, help="text files (the first is the validation split)")
    ap.add_argument("--lines", type=int, default=400, help="lines per text file")
    ap.add_argument("--vocab-size", type=int, default=512)
    ap.add_argument("--block-size", type=int, default=65, help="tokens per sample the run reads (max_seq_length + 1)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    rng = random.Random(args.seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = sorted({"".join(rng.choice(letters) for _ in range(rng.randint(2, 8))) for _ in range(400)})
    weights = [1.0 / (rank + 1) for rank in range(len(vocab))]
    shards = [make_text(rng, args.lines, vocab, weights) for _ in range(args.shards)]

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=args.vocab_size, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(shards, trainer=trainer)

    tok_dir = os.path.join(args.out, "tokenizer")
    os.makedirs(tok_dir, exist_ok=True)
    tok.save(os.path.join(tok_dir, "tokenizer.json"))
    with open(os.path.join(tok_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True,
                   "tokenizer_class": "PreTrainedTokenizerFast"}, f, indent=1)

    text_dir = os.path.join(args.out, "text")
    os.makedirs(text_dir, exist_ok=True)
    for name in os.listdir(text_dir):
        path = os.path.join(text_dir, name)
        if name.endswith(".txt"):
            os.remove(path)
        elif name in ("train", "val") and os.path.isdir(path):
            shutil.rmtree(path)
    for i, text in enumerate(shards):
        with open(os.path.join(text_dir, f"shard_{i:03d}.txt"), "w") as f:
            f.write(text)

    from litdata import optimize
    from litdata.streaming import TokensLoader

    files = sorted(os.path.join(text_dir, n) for n in os.listdir(text_dir) if n.endswith(".txt"))
    fn = partial(encode_file, tokenizer_file=os.path.join(tok_dir, "tokenizer.json"), bos_token="<s>")
    for split, inputs in (("val", files[:1]), ("train", files[1:])):
        optimize(fn=fn, inputs=inputs, output_dir=os.path.join(text_dir, split), num_workers=1,
                 chunk_bytes="50MB", item_loader=TokensLoader(block_size=args.block_size))
    print(f"wrote a {tok.get_vocab_size()}-token tokenizer, {len(shards)} text shards and their "
          f"token chunks (block {args.block_size}) to {args.out}")


if __name__ == "__main__":
    main()
