# C declarations for execution.py when it is compiled (setup.py).
from squall.model.tuple cimport Tuple, row_tuple
from squall.spark.collectors cimport BasicOutputCollector
