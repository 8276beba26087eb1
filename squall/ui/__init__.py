"""Operating squall: the driver's web page, REST API and Prometheus metrics (``server.py``), the figures they
share (``figures.py``, ``metrics.py``), and the client ``squall list/kill/activate/deactivate`` use
(``client.py``)."""
