"""Config check: a DeepSpeed config alone → findings, DeepSpeed's verdict and a memory plan, before launch."""
