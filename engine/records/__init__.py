"""What a batch leaves behind: its SQLite state, its transcripts, and what they add up to.

- the state: `store` (the one writer thread), `reader`, `rows` (statements and row mapping),
  `schema` (the file, its tables and version);
- transcripts: `transcripts` (a child's writer, the manifest, tails), `lines` (the line format),
  `events` (what goes to the writer process), `sink`, `writerproc` and `appender` (that process);
- totals: `meter` (usage and cost), `report`.
"""
