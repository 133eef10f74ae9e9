"""A tiny Hugging Face Trainer run with a DeepSpeed config and no zerodoctor code: the probe comes from
`zerodoctor run`.

Token ids in, 6 optimizer steps of 2 micro-batches of 4 sequences of 32 tokens; HF fills the "auto" values.
"""
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        ids = torch.randint(0, 128, (32,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


model = GPT2LMHeadModel(GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=2, n_head=2))
ds = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", "train_batch_size": "auto",
      "zero_optimization": {"stage": 2}, "optimizer": {"type": "AdamW", "params": {"lr": "auto"}}}
args = TrainingArguments(output_dir=sys.argv[1], max_steps=6, per_device_train_batch_size=4,
                         gradient_accumulation_steps=2,
                         deepspeed=ds, report_to=[], logging_steps=2, save_strategy="no", use_cpu=False,
                         learning_rate=1e-3)
Trainer(model=model, args=args, train_dataset=Tokens()).train()

# The Trainer leaves the process group to interpreter teardown, where destroying gloo's worker threads can abort a
# rank that finished its run ("terminate called without an active exception", SIGABRT: once in the CI run of stop
# 38, after all 40 steps); Accelerate's end_training() and samples/train.py end the same way.
if torch.distributed.is_initialized():
    torch.distributed.destroy_process_group()
