"""Reports: a study's tables (``tables``, re-exported here) and figures (``figures``), the benchmark's
tables and figures (``benchmark``).
"""

from .tables import (
    markdown_table,
    parameter_table,
    read_trials,
    setting_columns,
    summarise,
    write_tables,
)

__all__ = ["summarise", "write_tables", "read_trials", "setting_columns", "markdown_table", "parameter_table"]
