"""`oomkit decide`: tune the current setup, fix the environment, change the topology, or expand,
from evidence runs weighed against the production requirement in numbers. The rules are a data
table (`oomkit.decide.rules.RULES`); the checklist and the team criteria are evaluated item by item."""

from oomkit.decide.checklist import Item
from oomkit.decide.decide import DecideOptions, Decision, decide
from oomkit.decide.evidence import RunEvidence, load_all, read_evidence
from oomkit.decide.model import VERDICTS
from oomkit.decide.requirements import Requirements, load_requirements, parse_requirements
from oomkit.decide.rules import RULES, Rule
from oomkit.decide.teams import TEAMS, Team

__all__ = [
    "DecideOptions",
    "Decision",
    "Item",
    "RULES",
    "Requirements",
    "Rule",
    "RunEvidence",
    "TEAMS",
    "Team",
    "VERDICTS",
    "decide",
    "load_all",
    "load_requirements",
    "parse_requirements",
    "read_evidence",
]
