"""The research harness: how fast (``specem bench``) and how good (``specem eval``,
``specem eval-pool``) the ensemble is, apart from the product it measures. Its data is in
``data/`` and the runs the docs cite are in ``results/``."""
