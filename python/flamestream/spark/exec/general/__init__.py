"""The general path: items, stateless and keyed stages, routing; what any graph runs through."""
