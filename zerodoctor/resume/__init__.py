"""Fix and resume: a failed run → its diagnosis → the run relaunched from its last good checkpoint with a fix.

``zerodoctor run --fix-and-resume`` drives it (``loop.py``); the user's consent is the policy
(``policy.py``), the checkpoint is the newest saved before the fault (``checkpoints.py``), the
relaunch is the same command with the patched config and a resume argument (``relaunch.py``), and
every attempt is kept in the run directory with why it was made (``attempts.py``).
"""
