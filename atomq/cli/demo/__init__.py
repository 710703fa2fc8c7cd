"""``atomq demo``: the command (``command``), its run on a node of its own (``runner``) and the
process it registers there (``processes``)."""
