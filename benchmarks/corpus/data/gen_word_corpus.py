"""Write a small synthetic word-level text corpus (one sentence per line).

Our own generator for the torchdoctor benchmark corpus: it stands in for a
downloaded language-modelling corpus, so a script that reads a plain text file
of space-separated words runs offline.  Deterministic (fixed seed).
"""
import argparse
import os
import random


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True, help="file to write")
    ap.add_argument("--lines", type=int, default=200)
    ap.add_argument("--words-per-line", type=int, default=19)
    ap.add_argument("--vocab", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    rng = random.Random(args.seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = sorted({"".join(rng.choice(letters) for _ in range(rng.randint(2, 8)))
                    for _ in range(args.vocab)})
    # Zipf-like weights so that the text looks a bit like natural language.
    weights = [1.0 / (rank + 1) for rank in range(len(vocab))]
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        for _ in range(args.lines):
            words = rng.choices(vocab, weights=weights, k=args.words_per_line)
            f.write(" " + " ".join(words) + " \n")
    print(f"wrote {args.lines} lines to {args.out}")


if __name__ == "__main__":
    main()
