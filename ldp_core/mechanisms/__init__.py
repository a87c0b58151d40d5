"""One module per mechanism family, each the single home of its classes and hooks.

A family module defines its one-level class(es), its two-level class(es) and a
``MECHANISMS`` tuple of them; ``ldp_core.registry.FAMILIES`` lists the modules.
Adding a mechanism is one new module here plus its line in ``FAMILIES``.
"""
