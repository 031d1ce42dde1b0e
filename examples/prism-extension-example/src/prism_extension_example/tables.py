"""A per-run table kind: the runs of a lab's own cohort, kept apart from the PRISM ``indomain`` table.

A task joins it with ``reference_table: example_cohort``; summaries read it as
``tables["example_cohort"]``, and the report and the leaderboard show it like the built-in
in-distribution table, under its ``label`` (the leaderboard in its per-dataset table).
"""

COHORT = {
    "name": "example_cohort",
    "file": "example_cohort.csv",
    "required_columns": ("model", "dataset", "fraction", "seed", "auroc"),
    "role": "in_distribution",  # or "transfer" (then setting "pair", temperature "temperature_src")
    "setting": "dataset",  # the column naming a run's setting
    "temperature": "temperature",  # the column of the T behind ece_scaled_fixed
    "label": "example cohort (plugin table kind)",
    "order": 15,  # after indomain (10), before the transfer tables (30+)
    "leaderboard": "show",  # "rank": ranked with indomain; "": left off the leaderboard
    "description": "in-distribution runs of a lab's own cohort (example plugin)",
}
