"""The PySpark `atomq` data source and Spark executions of tenant listeners."""
