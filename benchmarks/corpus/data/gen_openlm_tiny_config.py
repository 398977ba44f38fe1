"""Write a tiny model configuration (JSON) for an open_lm-style trainer.

Our own generator for the torchdoctor benchmark corpus.  The trainer takes
`--model` as the name of one of its bundled configurations or as the path of a
JSON file with the same keys; the bundled ones start at 11M parameters with a
2048-token context and a 50k vocabulary, far over a minute per run on a CPU.
This writes a 2-layer, 64-wide model with a 64-token context and a 512-token
vocabulary (the trainer's synthetic data set draws tokens from that vocabulary).
"""
import argparse
import json
import os


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--hidden-dim", type=int, default=64)
    ap.add_argument("--n-layers", type=int, default=2)
    ap.add_argument("--n-heads", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--vocab-size", type=int, default=512)
    args = ap.parse_args()
    config = {"hidden_dim": args.hidden_dim, "n_layers": args.n_layers, "n_heads": args.n_heads,
              "seq_len": args.seq_len, "vocab_size": args.vocab_size,
              "post_embed_norm": False, "weight_tying": False}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(config, f, indent=1)
    print(f"wrote {args.out}: {config}")


if __name__ == "__main__":
    main()
