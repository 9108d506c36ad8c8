"""A proposal remembers whether the run that held it was tainted.

Approving a held call runs it with that taint (`agent/turns/approvals.py`), as the
tools node does for a call approved in a question: an agent schedule approved
from a run that had read outside content is stored `tainted`, so each of its
runs is tainted again. A proposal held before this upgrade counts as tainted
(where it came from is not known, and the careful reading is the safe one).

Revision ID: 0025
Revises: 0024
"""

from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add proposals.tainted (true for the rows already there)."""
    op.execute("ALTER TABLE proposals ADD COLUMN tainted BOOLEAN NOT NULL DEFAULT true")


def downgrade() -> None:
    """Drop the flag."""
    op.execute("ALTER TABLE proposals DROP COLUMN IF EXISTS tainted")
