"""A Hugging Face fine-tuning script in miniature: a two-layer GPT-2 built from a config (no
download), a token Dataset, TrainingArguments from argparse, and a Trainer subclass that keeps
a running list of losses. Its planted cause: `compute_loss` turns every micro-batch's loss into
a Python float (`.item()`), so the host waits for the device each time.

Runs plainly, under `torchdoctor run`, or with the doctor's callback when --doctor-out is given."""

import argparse
import os
import tempfile

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class Tokens(Dataset):
    def __init__(self, rows: int = 512, length: int = 32, vocab: int = 96):
        gen = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (rows, length), generator=gen)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class LossHistoryTrainer(Trainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.loss_history = []

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss = super().compute_loss(model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch)
        self.loss_history.append(loss.item())  # planted: TD201
        return loss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--max-steps", type=int, default=200)
    parser.add_argument("--doctor-out", help="measure with torchdoctor's callback, writing here")
    parser.add_argument("--doctor-steps", type=int, default=10)
    parser.add_argument("--doctor-warmup", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=96, n_positions=32, bos_token_id=0, eos_token_id=0)
    callbacks = []
    if args.doctor_out:
        from torchdoctor.integrations.transformers import DoctorCallback

        callbacks.append(DoctorCallback(steps=args.doctor_steps, warmup=args.doctor_warmup, out=args.doctor_out))
    with tempfile.TemporaryDirectory(prefix="hf-tiny-") as output_dir:
        training = TrainingArguments(output_dir=output_dir, per_device_train_batch_size=8,
                                     gradient_accumulation_steps=args.accumulate, max_steps=args.max_steps,
                                     learning_rate=1e-3, logging_steps=50, save_strategy="no", report_to=[],
                                     use_cpu=True, disable_tqdm=True, dataloader_num_workers=0)
        trainer = LossHistoryTrainer(model=GPT2LMHeadModel(config), args=training, train_dataset=Tokens(),
                                     callbacks=callbacks)
        trainer.train()
    print(f"stopped at global step {trainer.state.global_step} after {len(trainer.loss_history)} micro-batches")
    return trainer


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
