"""The generic engine: transition tables, static checks, the runner, crash injection, rendering,
contracts checked against tables, and the registry that discovers transactions.

This package imports nothing else of statecraft except its error types; the checkpoint
package binds the effect, guard and observation names that tables use. The registry imports
the modules that tables and specs name (``bindings``, ``scenarios``, ``check``) by their
dotted names at run time, never statically.
"""

from statecraft.engine.bindings import Bindings
from statecraft.engine.checks import check_table, table_problems
from statecraft.engine.contract import contract_problems
from statecraft.engine.crash import CrashPlan, Fault, FaultKind, IoGate, IoRecord, SimulatedCrash
from statecraft.engine.loader import load_table, parse_table
from statecraft.engine.registry import Transaction, discover, transaction_names
from statecraft.engine.render import render_mermaid
from statecraft.engine.runner import Machine, RunResult
from statecraft.engine.spec import Guarantee, Spec, load_spec
from statecraft.engine.table import Guard, MachineTable, StateSpec, TransitionSpec
from statecraft.engine.trace import TraceEvent, format_trace

__all__ = [
    "Bindings",
    "CrashPlan",
    "Fault",
    "FaultKind",
    "Guarantee",
    "Guard",
    "IoGate",
    "IoRecord",
    "Machine",
    "MachineTable",
    "RunResult",
    "SimulatedCrash",
    "Spec",
    "StateSpec",
    "TraceEvent",
    "Transaction",
    "TransitionSpec",
    "check_table",
    "contract_problems",
    "discover",
    "format_trace",
    "load_spec",
    "load_table",
    "parse_table",
    "render_mermaid",
    "table_problems",
    "transaction_names",
]
