"""One module per `gdsbench report --format`: each registers a renderer of the Report value under its
own module name (gdsbench.report.register). Adding a format is adding a module here."""
