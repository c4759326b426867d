"""The portal's routes, one router per part of its API (included by `create_app` in this order: specific paths
before the generic `{plural}` ones)."""
