"""A --handlers module that fails while it is imported: serve must refuse to start, naming it."""

raise RuntimeError("this module is broken on purpose")
