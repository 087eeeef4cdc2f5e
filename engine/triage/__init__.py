"""Triage of a batch's children: the query language, outliers, error signatures (pure values)."""
