"""The main node that ``atomq serve`` runs: its configuration (``config``), the owner key
(``owner_key``), rq's Redis (``rq_redis``), gunicorn's master (``master``) and HTTP
workers (``http_server``, ``worker_loops``), and the order it starts and stops in
(``lifecycle``)."""
