"""ComparisonReport and its renderings, under the import path they have always had.

The types live in `comparisons.verdicts`, the renderings in `comparisons.render`; this module
re-exports both (e.g. `comparisons.report.SCHEMA_VERSION`, `comparisons.report.print_table`).
"""
from comparisons.render import FORMATS, format_number, headline, print_table, to_markdown, to_table, verdict
from comparisons.verdicts import SCHEMA_VERSION, Check, ComparisonReport

__all__ = ["FORMATS", "SCHEMA_VERSION", "Check", "ComparisonReport", "format_number", "headline", "print_table",
           "to_markdown", "to_table", "verdict"]
