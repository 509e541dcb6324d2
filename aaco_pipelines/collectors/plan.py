"""What a trace reader hands the loader for one table: the relation to select from (a view or
table function over the file) and, per TraceLake column, the SQL expression that fills it.
The loader (traces.py) types and inserts it; the readers never write."""

Plan = tuple[str, dict[str, str]]
