"""``rigkit report``'s page (:mod:`rigkit.report.page`) and the charts it and the bench write
(:mod:`rigkit.report.chart`, matplotlib), and the fleet's figures as Prometheus metrics that ``rigkit drift
--metrics`` and ``rigkit bench --metrics`` write (:mod:`rigkit.report.prometheus`)."""
