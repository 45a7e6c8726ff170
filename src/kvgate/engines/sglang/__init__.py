"""SGLang's rules: flags, pool, budget, log reader, prefix-cache model (DESIGN.md §8)."""
