//! [`parse`]: reads the expressions of a request back into an [`Update`] and
//! a [`Condition`] — the inverse of [`Expressions::new`](crate::Expressions::new).
//!
//! It accepts exactly the forms the builder renders (`SET` before `REMOVE`,
//! `#a = :v`, `#a = #a + :v`, `#a = if_not_exists(#a, :v) + :v`,
//! `#a = list_append(if_not_exists(#a, :v), :v)`,
//! `attribute_not_exists(#a)`, `AND`), every name and value through a
//! placeholder. Like DynamoDB, it rejects a placeholder that is undefined or
//! unused, an empty placeholder map, and an update that writes an attribute
//! twice (DynamoDB developer guide: "Update expressions", "Condition
//! expressions", "Expression attribute names", "Expression attribute
//! values").

use std::collections::{HashMap, HashSet};

use aws_sdk_dynamodb::operation::update_item::UpdateItemInput;
use aws_sdk_dynamodb::types::AttributeValue;

use crate::{Condition, SetValue, Update};

/// Why a request's expressions are not what the lease table sends; the
/// fake table answers them with a `ValidationException`, as DynamoDB does.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExpressionError {
    /// Not one of the rendered forms.
    #[error("invalid {part} expression {text:?}: {reason}")]
    Syntax {
        /// `update` or `condition`.
        part: &'static str,
        /// The expression.
        text: String,
        /// What is wrong, e.g. `unexpected Word("OR")`.
        reason: String,
    },
    /// A placeholder missing from `ExpressionAttributeNames` or
    /// `ExpressionAttributeValues`.
    #[error("undefined placeholder {0}")]
    Undefined(String),
    /// A placeholder defined but used by neither expression.
    #[error("placeholder {0} is unused in expressions")]
    Unused(String),
    /// `ExpressionAttributeNames` or `ExpressionAttributeValues` present but
    /// empty.
    #[error("{0} must not be empty")]
    EmptyMap(&'static str),
    /// An attribute the update writes twice.
    #[error("two document paths overlap: {0}")]
    Overlap(String),
    /// A number that is not a whole non-negative one, in an increment or in
    /// the attribute it adds to.
    #[error("{0} is not a non-negative integer")]
    NotANumber(String),
    /// `list_append` with an operand that is not a list (`L`), in the
    /// request or in the item.
    #[error("{0} is not a list")]
    NotAList(String),
    /// `#a = #a + :v` on an item without `#a`.
    #[error("the update adds to {0}, which the item does not have")]
    Absent(String),
}

/// The update and condition of an [UpdateItem] request.
///
/// [UpdateItem]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_UpdateItem.html
///
/// # Errors
/// As [`parse`].
pub fn parse_update_item(input: &UpdateItemInput) -> Result<(Update, Condition), ExpressionError> {
    parse(
        input.update_expression(),
        input.condition_expression(),
        input.expression_attribute_names(),
        input.expression_attribute_values(),
    )
}

/// The update and condition that `update` and `condition` render with the
/// placeholders `names` and `values` (each part empty when absent).
///
/// # Errors
/// [`ExpressionError`]: a form the builder does not render, an undefined or
/// unused placeholder, an empty map, or an attribute written twice.
pub fn parse(
    update: Option<&str>,
    condition: Option<&str>,
    names: Option<&HashMap<String, String>>,
    values: Option<&HashMap<String, AttributeValue>>,
) -> Result<(Update, Condition), ExpressionError> {
    if names.is_some_and(HashMap::is_empty) {
        return Err(ExpressionError::EmptyMap("ExpressionAttributeNames"));
    }
    if values.is_some_and(HashMap::is_empty) {
        return Err(ExpressionError::EmptyMap("ExpressionAttributeValues"));
    }
    let (no_names, no_values) = (HashMap::new(), HashMap::new());
    let mut reader = Reader {
        names: names.unwrap_or(&no_names),
        values: values.unwrap_or(&no_values),
        used: HashSet::new(),
    };
    let update = match update {
        Some(text) => reader.update(&mut Cursor::new("update", text)?)?,
        None => Update::new(),
    };
    let condition = match condition {
        Some(text) => reader.condition(&mut Cursor::new("condition", text)?)?,
        None => Condition::new(),
    };
    let mut unused: Vec<&String> = reader
        .names
        .keys()
        .chain(reader.values.keys())
        .filter(|placeholder| !reader.used.contains(placeholder.as_str()))
        .collect();
    unused.sort();
    match unused.first() {
        Some(placeholder) => Err(ExpressionError::Unused((*placeholder).clone())),
        None => Ok((update, condition)),
    }
}

/// A token of an expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token<'t> {
    /// `#a0`.
    Name(&'t str),
    /// `:v0`.
    Value(&'t str),
    /// `SET`, `REMOVE`, `AND`, `if_not_exists`, `attribute_not_exists`.
    Word(&'t str),
    /// `=`, `+`, `(`, `)`, `,`.
    Symbol(char),
}

/// The tokens of one expression, and how far they are read.
struct Cursor<'t> {
    part: &'static str,
    text: &'t str,
    tokens: Vec<Token<'t>>,
    at: usize,
}

impl<'t> Cursor<'t> {
    fn new(part: &'static str, text: &'t str) -> Result<Self, ExpressionError> {
        let mut cursor = Self {
            part,
            text,
            tokens: Vec::new(),
            at: 0,
        };
        let mut rest = text;
        loop {
            rest = rest.trim_start();
            let Some(first) = rest.chars().next() else {
                return Ok(cursor);
            };
            if "=+(),".contains(first) {
                cursor.tokens.push(Token::Symbol(first));
                rest = &rest[1..];
                continue;
            }
            let sigil = usize::from(first == '#' || first == ':');
            let length = rest[sigil..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len() - sigil);
            if length == 0 {
                return Err(cursor.error(format!("unexpected {first:?}")));
            }
            let (word, after) = rest.split_at(sigil + length);
            cursor.tokens.push(match first {
                '#' => Token::Name(word),
                ':' => Token::Value(word),
                _ => Token::Word(word),
            });
            rest = after;
        }
    }

    fn peek(&self) -> Option<Token<'t>> {
        self.tokens.get(self.at).copied()
    }

    fn next(&mut self) -> Option<Token<'t>> {
        let token = self.tokens.get(self.at).copied();
        self.at += 1;
        token
    }

    /// Takes the next token if it is `token`.
    fn take(&mut self, token: Token<'_>) -> bool {
        let found = self.peek() == Some(token);
        if found {
            self.at += 1;
        }
        found
    }

    fn expect(&mut self, symbol: char) -> Result<(), ExpressionError> {
        match self.next() {
            Some(Token::Symbol(found)) if found == symbol => Ok(()),
            other => Err(self.unexpected(other)),
        }
    }

    fn unexpected(&self, token: Option<Token<'_>>) -> ExpressionError {
        self.error(match token {
            Some(token) => format!("unexpected {token:?}"),
            None => "unexpected end".to_owned(),
        })
    }

    fn error(&self, reason: String) -> ExpressionError {
        ExpressionError::Syntax {
            part: self.part,
            text: self.text.to_owned(),
            reason,
        }
    }
}

/// Resolves placeholders, remembering which were used.
struct Reader<'m> {
    names: &'m HashMap<String, String>,
    values: &'m HashMap<String, AttributeValue>,
    used: HashSet<String>,
}

impl Reader<'_> {
    /// `SET assignment, … REMOVE #a, …`, either part optional but not both.
    fn update(&mut self, cursor: &mut Cursor<'_>) -> Result<Update, ExpressionError> {
        let mut update = Update::new();
        let mut written = HashSet::new();
        let mut write = |attribute: &String| {
            if written.insert(attribute.clone()) {
                Ok(())
            } else {
                Err(ExpressionError::Overlap(attribute.clone()))
            }
        };
        if cursor.take(Token::Word("SET")) {
            loop {
                let (attribute, value) = self.assignment(cursor)?;
                write(&attribute)?;
                update = match value {
                    SetValue::Value(value) => update.set(attribute, value),
                    SetValue::Add(by) => update.add(attribute, by),
                    SetValue::AddOrStart { start, by } => update.add_or_start(attribute, start, by),
                    SetValue::Append(elements) => update.append(attribute, elements),
                };
                if !cursor.take(Token::Symbol(',')) {
                    break;
                }
            }
        }
        if cursor.take(Token::Word("REMOVE")) {
            loop {
                let attribute = self.name(cursor)?;
                write(&attribute)?;
                update = update.remove(attribute);
                if !cursor.take(Token::Symbol(',')) {
                    break;
                }
            }
        }
        match cursor.next() {
            None if !written.is_empty() => Ok(update),
            other => Err(cursor.unexpected(other)),
        }
    }

    /// `#a = :v`, `#a = #a + :v`, `#a = if_not_exists(#a, :v) + :v` or
    /// `#a = list_append(if_not_exists(#a, :v), :v)` (the first list
    /// empty, as the builder renders it).
    fn assignment(
        &mut self,
        cursor: &mut Cursor<'_>,
    ) -> Result<(String, SetValue), ExpressionError> {
        let attribute = self.name(cursor)?;
        cursor.expect('=')?;
        let value = if cursor.take(Token::Word("list_append")) {
            cursor.expect('(')?;
            if !cursor.take(Token::Word("if_not_exists")) {
                return Err(cursor.unexpected(cursor.peek()));
            }
            cursor.expect('(')?;
            self.base(cursor, &attribute)?;
            cursor.expect(',')?;
            if !self.list(cursor)?.is_empty() {
                return Err(cursor.error("list_append starts from a non-empty list".to_owned()));
            }
            cursor.expect(')')?;
            cursor.expect(',')?;
            let elements = self.list(cursor)?;
            cursor.expect(')')?;
            SetValue::Append(elements)
        } else if cursor.take(Token::Word("if_not_exists")) {
            cursor.expect('(')?;
            self.base(cursor, &attribute)?;
            cursor.expect(',')?;
            let start = self.number(cursor)?;
            cursor.expect(')')?;
            cursor.expect('+')?;
            SetValue::AddOrStart {
                start,
                by: self.number(cursor)?,
            }
        } else if matches!(cursor.peek(), Some(Token::Name(_))) {
            self.base(cursor, &attribute)?;
            cursor.expect('+')?;
            SetValue::Add(self.number(cursor)?)
        } else {
            SetValue::Value(self.value(cursor)?)
        };
        Ok((attribute, value))
    }

    /// `#a = :v` and `attribute_not_exists(#a)` clauses joined by `AND`.
    fn condition(&mut self, cursor: &mut Cursor<'_>) -> Result<Condition, ExpressionError> {
        let mut condition = Condition::new();
        loop {
            condition = if cursor.take(Token::Word("attribute_not_exists")) {
                cursor.expect('(')?;
                let attribute = self.name(cursor)?;
                cursor.expect(')')?;
                condition.not_exists(attribute)
            } else {
                let attribute = self.name(cursor)?;
                cursor.expect('=')?;
                condition.equals(attribute, self.value(cursor)?)
            };
            match cursor.next() {
                None => return Ok(condition),
                Some(Token::Word("AND")) => {}
                other => return Err(cursor.unexpected(other)),
            }
        }
    }

    /// Reads `#b` in `#a = #b + …`, which must stand for `attribute`: the
    /// builder adds to the attribute it assigns.
    fn base(&mut self, cursor: &mut Cursor<'_>, attribute: &str) -> Result<(), ExpressionError> {
        let base = self.name(cursor)?;
        if base == attribute {
            Ok(())
        } else {
            Err(cursor.error(format!("{base} + … assigned to {attribute}")))
        }
    }

    /// Reads a name placeholder: the attribute it stands for.
    fn name(&mut self, cursor: &mut Cursor<'_>) -> Result<String, ExpressionError> {
        match cursor.next() {
            Some(Token::Name(placeholder)) => lookup(&mut self.used, self.names, placeholder),
            other => Err(cursor.unexpected(other)),
        }
    }

    /// Reads a value placeholder: the value it stands for.
    fn value(&mut self, cursor: &mut Cursor<'_>) -> Result<AttributeValue, ExpressionError> {
        match cursor.next() {
            Some(Token::Value(placeholder)) => lookup(&mut self.used, self.values, placeholder),
            other => Err(cursor.unexpected(other)),
        }
    }

    /// Reads a value placeholder that stands for a list: its elements.
    fn list(&mut self, cursor: &mut Cursor<'_>) -> Result<Vec<AttributeValue>, ExpressionError> {
        match self.value(cursor)? {
            AttributeValue::L(elements) => Ok(elements),
            other => Err(ExpressionError::NotAList(format!("{other:?}"))),
        }
    }

    /// Reads a value placeholder that stands for a whole non-negative number.
    fn number(&mut self, cursor: &mut Cursor<'_>) -> Result<u64, ExpressionError> {
        let value = self.value(cursor)?;
        value
            .as_n()
            .ok()
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| ExpressionError::NotANumber(format!("{value:?}")))
    }
}

/// What `placeholder` stands for in `map`, which marks it used.
fn lookup<T: Clone>(
    used: &mut HashSet<String>,
    map: &HashMap<String, T>,
    placeholder: &str,
) -> Result<T, ExpressionError> {
    let found = map
        .get(placeholder)
        .ok_or_else(|| ExpressionError::Undefined(placeholder.to_owned()))?;
    used.insert(placeholder.to_owned());
    Ok(found.clone())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::Expressions;

    fn parse_rendered(update: &Update, condition: &Condition) -> (Update, Condition) {
        let e = Expressions::new(update, condition);
        parse(
            e.update.as_deref(),
            e.condition.as_deref(),
            e.names.as_ref(),
            e.values.as_ref(),
        )
        .unwrap()
    }

    fn attribute() -> impl Strategy<Value = String> {
        prop::sample::select(vec![
            "leaseKey",
            "leaseOwner",
            "leaseCounter",
            "checkpoint",
            "name",
        ])
        .prop_map(str::to_owned)
    }

    fn set_value() -> impl Strategy<Value = SetValue> {
        prop_oneof![
            any::<u64>().prop_map(|n| SetValue::Value(AttributeValue::N(n.to_string()))),
            "[a-z =#:(),]{0,8}".prop_map(|s| SetValue::Value(AttributeValue::S(s))),
            any::<u64>().prop_map(SetValue::Add),
            (any::<u64>(), any::<u64>()).prop_map(|(start, by)| SetValue::AddOrStart { start, by }),
            prop::collection::vec("[a-z{}\":,]{0,8}", 0..3).prop_map(|elements| {
                SetValue::Append(elements.into_iter().map(AttributeValue::S).collect())
            }),
        ]
    }

    proptest! {
        /// Whatever the builder renders reads back as itself.
        #[test]
        fn reads_back_what_the_builder_renders(
            sets in prop::collection::vec((attribute(), set_value()), 0..5),
            removes in prop::collection::vec(attribute(), 0..3),
            clauses in prop::collection::vec((attribute(), prop::option::of("[a-z]{0,4}")), 0..4),
        ) {
            let mut seen = HashSet::new();
            let mut update = Update::new();
            for (attribute, value) in sets {
                if seen.insert(attribute.clone()) {
                    update = match value {
                        SetValue::Value(value) => update.set(attribute, value),
                        SetValue::Add(by) => update.add(attribute, by),
                        SetValue::AddOrStart { start, by } => update.add_or_start(attribute, start, by),
                        SetValue::Append(elements) => update.append(attribute, elements),
                    };
                }
            }
            for attribute in removes {
                if seen.insert(attribute.clone()) {
                    update = update.remove(attribute);
                }
            }
            let condition = clauses.into_iter().fold(Condition::new(), |c, (a, v)| {
                c.equals_or_absent(a, v.map(AttributeValue::S))
            });
            prop_assert_eq!(parse_rendered(&update, &condition), (update, condition));
        }
    }

    fn names(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(p, n)| ((*p).to_owned(), (*n).to_owned()))
            .collect()
    }

    fn values(pairs: &[(&str, u64)]) -> HashMap<String, AttributeValue> {
        pairs
            .iter()
            .map(|(p, n)| ((*p).to_owned(), AttributeValue::N(n.to_string())))
            .collect()
    }

    #[test]
    fn rejects_what_dynamodb_or_the_builder_would_not_send() {
        let n = names(&[("#a0", "x"), ("#a1", "y")]);
        let v = values(&[(":v0", 1)]);
        let parsed = |update: &str, condition: Option<&str>| {
            parse(Some(update), condition, Some(&n), Some(&v)).map(|_| ())
        };
        assert_eq!(
            parsed("SET #a0 = :v0", None),
            Err(ExpressionError::Unused("#a1".to_owned()))
        );
        assert_eq!(
            parsed("SET #a0 = :v0 REMOVE #a1, #a0", None),
            Err(ExpressionError::Overlap("x".to_owned()))
        );
        assert_eq!(
            parsed("SET #a0 = :v0 REMOVE #a2", None),
            Err(ExpressionError::Undefined("#a2".to_owned()))
        );
        assert!(matches!(
            parsed("SET #a0 = #a1 + :v0 REMOVE #a1", None),
            Err(ExpressionError::Syntax { .. })
        ));
        assert!(matches!(
            parsed("REMOVE #a1 SET #a0 = :v0", None),
            Err(ExpressionError::Syntax { .. })
        ));
        assert!(matches!(
            parsed("REMOVE #a1", Some("#a0 = :v0 OR #a0 = :v0")),
            Err(ExpressionError::Syntax { .. })
        ));
        assert_eq!(parsed("REMOVE #a1", Some("#a0 = :v0")), Ok(()));
        assert_eq!(
            parse(None, None, Some(&HashMap::new()), None).map(|_| ()),
            Err(ExpressionError::EmptyMap("ExpressionAttributeNames"))
        );
    }
}
