"""A tiny Hugging Face Trainer script as people write them: TrainingArguments from the command line
(``--deepspeed ds.json --output_dir out --save_steps 2 --resume_from_checkpoint out/checkpoint-4``), no
zerodoctor code. Faults for the fix-and-resume tests:

* ``--crash_at N`` makes rank 1 run out of host memory (``MemoryError``) when step N ends, whatever the config says;
* ``--loss_mult 1e9 --loss_mult_from N --loss_mult_above_lr LR``: after step N, while the lr the optimizer steps
  with is above LR, the loss is multiplied (a ``compute_loss`` of the user's own, as scripts write them), so the
  fp16 gradients overflow at every scale and DeepSpeed's scaler collapses: a too-high lr's divergence made
  deterministic on CPU, as ``samples/train.py`` makes it for a DeepSpeed script. A lower lr, in effect, cures it.

``--cpu_fp16_shim`` lets DeepSpeed's CPU accelerator do fp16 (``tests/shims/cpu_fp16.py``). That is all the
Trainer needs: ``--fp16`` with ``--deepspeed`` hands mixed precision to DeepSpeed (Accelerate's DeepSpeed plugin
takes it from the config's ``fp16.enabled``), so neither TrainingArguments nor Accelerate asks for a GPU; DeepSpeed
alone refuses fp16 on its CPU accelerator, which the shim answers.
"""
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel, HfArgumentParser, Trainer, TrainerCallback, TrainingArguments

SHIM = Path(__file__).resolve().parents[1] / "shims" / "cpu_fp16.py"


@dataclass
class Fault:
    crash_at: int = 0
    loss_mult: float = 1.0
    loss_mult_from: int = 0
    loss_mult_above_lr: float = 0.0
    cpu_fp16_shim: bool = False


class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, i):
        ids = torch.randint(0, 128, (32,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


class Crash(TrainerCallback):
    def __init__(self, at: int) -> None:
        self.at = at

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.at and int(os.environ.get("RANK", "0")) == 1:
            bytearray(1 << 62)  # CPython's allocator refuses: MemoryError


class FaultyTrainer(Trainer):
    """The ``--loss_mult`` fault in the user's own ``compute_loss``."""

    def __init__(self, fault: Fault, **kwargs) -> None:
        super().__init__(**kwargs)
        self.fault = fault

    def compute_loss(self, model, inputs, *args, **kwargs):
        loss = super().compute_loss(model, inputs, *args, **kwargs)
        fault = self.fault
        if (fault.loss_mult != 1.0 and self.state.global_step >= fault.loss_mult_from
                and self.optimizer.param_groups[0]["lr"] > fault.loss_mult_above_lr):
            loss = loss * fault.loss_mult
        return loss


args, fault = HfArgumentParser((TrainingArguments, Fault)).parse_args_into_dataclasses()
if fault.cpu_fp16_shim:
    spec = importlib.util.spec_from_file_location("cpu_fp16_shim", SHIM)
    shim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shim)
    shim.install()
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=2, n_head=2))
trainer = FaultyTrainer(fault, model=model, args=args, train_dataset=Tokens(), callbacks=[Crash(fault.crash_at)])
trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)

# The Trainer leaves the process group to interpreter teardown, where destroying gloo's worker threads can abort a
# rank that finished its run ("terminate called without an active exception", SIGABRT: once in the CI run of stop
# 38, after all 40 steps); Accelerate's end_training() and samples/train.py end the same way.
if torch.distributed.is_initialized():
    torch.distributed.destroy_process_group()
