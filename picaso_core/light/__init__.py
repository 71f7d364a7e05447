"""The bottom floor: small modules that import only the standard library, so that every layer, the
app's `--help` and a torch-free `import picaso_core` may use them.

    assets     where the bundled demo model, data and shipped analyses are
    defaults   the session's light defaults (cache folder, split, token budget, dtypes) and argparse types
    deadline   a job's cooperative time limit (until() per thread, check() at safe points)
    memory     the caches' sizes, the allocator's settings and the memory probes
    faces      lazy_face: a package's public names imported on first use

This __init__ imports nothing: each module is imported by name.
"""

__all__ = ["assets", "defaults", "deadline", "memory", "faces"]  # modules: `from picaso_core.light import deadline`
