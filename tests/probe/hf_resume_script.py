"""A tiny Hugging Face Trainer script as people write them: TrainingArguments from the command line
(``--deepspeed ds.json --output_dir out --save_steps 2 --resume_from_checkpoint out/checkpoint-4``), no
zerodoctor code. Fault for the fix-and-resume tests: ``--crash_at N`` makes rank 1 run out of host memory
(``MemoryError``) when step N ends, whatever the config says.
"""
import os
from dataclasses import dataclass

import torch
from transformers import GPT2Config, GPT2LMHeadModel, HfArgumentParser, Trainer, TrainerCallback, TrainingArguments


@dataclass
class Fault:
    crash_at: int = 0


class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, i):
        ids = torch.randint(0, 128, (32,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


class Crash(TrainerCallback):
    def __init__(self, at: int) -> None:
        self.at = at

    def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN003, ANN201
        if state.global_step == self.at and int(os.environ.get("RANK", "0")) == 1:
            bytearray(1 << 62)  # CPython's allocator refuses: MemoryError


args, fault = HfArgumentParser((TrainingArguments, Fault)).parse_args_into_dataclasses()
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=2, n_head=2))
trainer = Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[Crash(fault.crash_at)])
trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
