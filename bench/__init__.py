"""``make bench``: what the suite adds to the calls it makes, measured on loopback (``python -m bench``)."""
