"""``rigkit report``'s page (:mod:`rigkit.report.page`) and the charts it and the bench write
(:mod:`rigkit.report.chart`, matplotlib)."""
