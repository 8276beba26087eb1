# C declarations for collectors.py when it is compiled (setup.py).
from squall.model.tuple cimport Tuple
