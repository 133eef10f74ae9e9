"""Fix and resume, policy: a failed attempt's findings → the fixes the user consented to in advance.

``safe`` takes only fixes marked safe (training math unchanged: allocator settings, bucket sizes,
pinning, NCCL settings); ``unsafe-ok`` also those that change the optimisation (a fixed loss scale,
a lower lr, bf16). A fix is a remedy only if it changes what the job runs with: a config patch, or
environment that changes behaviour. Environment that only makes the next failure say more
(``CUDA_LAUNCH_BLOCKING``, fault handlers, NCCL's debug output and flight recorder) would spend a
restart on the same fault, so it never triggers one.
"""

from __future__ import annotations

from dataclasses import dataclass

from zerodoctor.fixes.apply import patch_paths
from zerodoctor.rulebook.finding import Finding, Fix

POLICIES = ("safe", "unsafe-ok")
DIAGNOSTIC_ENV = frozenset({
    "CUDA_LAUNCH_BLOCKING", "PYTHONFAULTHANDLER", "TORCH_SHOW_CPP_STACKTRACES", "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS",
    "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_DISTRIBUTED_DEBUG",
})


@dataclass(frozen=True)
class Policy:
    name: str  # one of POLICIES
    only: tuple[str, ...] = ()  # --on: rule codes or prefixes; empty: every rule

    def covers(self, finding: Finding) -> bool:
        """An error the user let us act on."""
        return finding.severity == "error" and (not self.only or finding.rule.startswith(self.only))

    def allows(self, fix: Fix) -> bool:
        return self.name == "unsafe-ok" or fix.safety == "safe"

    def remedies(self, finding: Finding) -> list[Fix]:
        """The finding's fixes this policy may apply, in the rule's order."""
        return [fix for fix in finding.fixes if self.allows(fix) and is_remedy(fix)]


def is_remedy(fix: Fix) -> bool:
    return bool(fix.config_patch) or any(name not in DIAGNOSTIC_ENV for name in fix.env or {})


def fix_key(rule: str, fix: Fix) -> str:
    """How an attempt names a fix it tried, so it is never applied twice: the rule and what the fix changes.

    Not the title: it quotes the attempt's numbers ("lower the lr to 5e-4"), and the same fix judged on
    the next attempt would read as new and lower the lr again.
    """
    changes = sorted([".".join(path) for path in patch_paths(fix.config_patch or {})]
                     + [f"${k}" for k in fix.env or {}])
    return f"{rule}: {', '.join(changes)}"
