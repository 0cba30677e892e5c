//! The one table layout of the CLI's reports: columns of a fixed width,
//! each left- or right-aligned, with the text between them; rows of cells.
//!
//! A cell is padded with spaces to its column's width (counted in
//! characters, as `format!("{:>8}")` counts them) and never cut: a longer
//! cell pushes the rest of its row right. A column of width 0 is its cell as
//! it is (a free-text last column).

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Align {
    Left,
    Right,
}

/// One column: alignment, width, and the text before it (the table's gap
/// unless set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    align: Align,
    width: usize,
    before: Option<&'static str>,
}

impl Column {
    pub fn left(width: usize) -> Column {
        Column { align: Align::Left, width, before: None }
    }

    pub fn right(width: usize) -> Column {
        Column { align: Align::Right, width, before: None }
    }

    /// The text between the previous column and this one (for the first
    /// column: after the table's indent).
    pub fn after(self, text: &'static str) -> Column {
        Column { before: Some(text), ..self }
    }
}

/// Rows laid out in [`Column`]s; `Display` writes every line, `\n`-ended.
#[derive(Debug, Clone)]
pub struct Table {
    columns: Vec<Column>,
    gap: &'static str,
    indent: &'static str,
    lines: Vec<String>,
}

impl Table {
    /// Columns separated by one space, no indent.
    pub fn new(columns: impl IntoIterator<Item = Column>) -> Table {
        Table { columns: columns.into_iter().collect(), gap: " ", indent: "", lines: Vec::new() }
    }

    /// The text between columns that do not set their own.
    pub fn gap(self, gap: &'static str) -> Table {
        Table { gap, ..self }
    }

    /// The text before every row.
    pub fn indent(self, indent: &'static str) -> Table {
        Table { indent, ..self }
    }

    /// A row: one cell per column, in order (cells past the last column are
    /// left out, missing ones are empty).
    pub fn row<S: AsRef<str>>(&mut self, cells: impl IntoIterator<Item = S>) {
        let mut line = String::from(self.indent);
        let mut cells = cells.into_iter();
        for (k, c) in self.columns.iter().enumerate() {
            line.push_str(c.before.unwrap_or(if k == 0 { "" } else { self.gap }));
            let cell = cells.next();
            let cell = cell.as_ref().map_or("", |s| s.as_ref());
            let pad = " ".repeat(c.width.saturating_sub(cell.chars().count()));
            match c.align {
                Align::Left => {
                    line.push_str(cell);
                    line.push_str(&pad);
                }
                Align::Right => {
                    line.push_str(&pad);
                    line.push_str(cell);
                }
            }
        }
        self.lines.push(line);
    }

    /// A line as it is (a rule, a note, a blank line).
    pub fn text(&mut self, line: impl Into<String>) {
        self.lines.push(line.into());
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for line in &self.lines {
            writeln!(f, "{line}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lays_out_as_format_width_does() {
        let mut t = Table::new([Column::right(4), Column::left(6).after("  "), Column::right(5), Column::left(0)]).indent("> ");
        t.row(["1", "ab", "2.5%", "free text"]);
        t.row(["12345", "abcdefgh", "é", ""]);
        t.text("--");
        t.row(["x"]);
        let want = [
            format!("> {:>4}  {:<6} {:>5} {}", "1", "ab", "2.5%", "free text"),
            format!("> {:>4}  {:<6} {:>5} {}", "12345", "abcdefgh", "é", ""),
            "--".to_string(),
            format!("> {:>4}  {:<6} {:>5} {}", "x", "", "", ""),
        ];
        assert_eq!(t.to_string(), want.map(|l| l + "\n").concat());
    }

    #[test]
    fn a_gap_of_nothing_joins_the_columns() {
        let mut t = Table::new([Column::left(3), Column::right(4), Column::right(4)]).gap("");
        t.row(["a", "1", "22"]);
        assert_eq!(t.to_string(), "a     1  22\n");
    }
}
