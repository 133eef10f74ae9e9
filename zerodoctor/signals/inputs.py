"""Signals: the inputs a signal comes from, and the switch that shows it in a console log.

Every ``Signal`` declares both (``shown_by``, ``switch``): what a rule that could not be judged
should say to turn on is read from the catalogue (``rulebook/hints.py``, ``report/coverage.py``),
never guessed from a signal's name. A signal that declares no input (a crash, an OOM message, a
watchdog timeout) can come from any log that printed it.
"""

from __future__ import annotations

# what a run's inputs can hold (``rulebook.hints.RunInputs`` says which a run has)
CONFIG, STEPS, HEARTBEATS, DEVICE, DUMPS = "config", "steps", "heartbeats", "device memory", "flight-recorder dumps"
TRACES = "profiler traces"
# collective times that waited for the device: a GPU's comms logger, or the probe's own intervals (on DeepSpeed's
# CPU accelerator ``synchronize`` does nothing, and the logger times an async all-gather to its launch only)
SYNCED = "synchronised collective times"
INPUTS = (CONFIG, STEPS, HEARTBEATS, DEVICE, DUMPS, TRACES, SYNCED)

# the switches, in the words of DeepSpeed's config and PyTorch's environment
FP16_LINES = ('set "log_level": "info" and "steps_per_print": 1 in the DeepSpeed config (since 0.17.6 '
              "the OVERFLOW and step=N lines are hidden at the default level)")
STEP_LINES = '"steps_per_print": 1 (with "log_level": "info") prints each step\'s lr and skips'
COMM_TIMES = ('"wall_clock_breakdown": true prints step and allreduce times, "comms_logger": '
              '{"enabled": true} the collectives')
OPTIMIZER_TIME = '"wall_clock_breakdown": true prints the optimizer step time'
STEP_TIMES = '"wall_clock_breakdown": true prints the step and allreduce times'
BATCH_DUMP = 'the DeepSpeed config dump ("log_level": "info") prints the batch settings'
RUN_DUMP = 'the DeepSpeed config dump ("log_level": "info") prints world size, stage and precision'
CONFIG_DUMP = 'the DeepSpeed config dump ("log_level": "info") prints the whole config'
FLIGHT_RECORDER = ("TORCH_NCCL_DUMP_ON_TIMEOUT=1 makes NCCL dump its flight recorder (under "
                   "`zerodoctor run` the dumps land in the run directory)")
HOST_TIMES = ("no console switch shows it on DeepSpeed's CPU accelerator, whose comms logger times ZeRO-3's async "
              "all-gathers to their launch only")
PROFILE = ("profile a few steps: `zerodoctor run --profile 10-12`, or hand over torch.profiler traces "
           "(export_chrome_trace, TensorBoard's plugin folder) with the logs")
