"""One way to print benchmark rows: measure, value, goal."""


def print_table(rows: list[tuple[str, str, str]]) -> None:
    width = max(len(name) for name, _, _ in rows)
    for name, value, goal in rows:
        print(f"{name:<{width}}  {value:>16}  {goal}")
