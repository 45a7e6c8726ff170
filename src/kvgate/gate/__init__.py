"""The gate: verdicts, candidates and flip boundaries (pure, ``verdict``), decision
assembly (``decision``), records (``record``), text and Markdown rendering (``render``),
the resident-weights policies (``weights_policy``) and the case of ``kvgate demo``
(``source_case``).
"""
