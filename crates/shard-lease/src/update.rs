//! [`Update`] and [`Condition`]: the typed form of the update and condition
//! expressions of a lease-table write, and [`Expressions`], their rendering
//! into the request fields DynamoDB takes.
//!
//! Only the forms the lease table writes exist: `SET` of a value, of
//! `attr + value`, of `if_not_exists(attr, value) + value` and of
//! `list_append(if_not_exists(attr, []), list)`; `REMOVE`; and conditions
//! made of `attr = value` and `attribute_not_exists(attr)` joined by `AND`.
//! See the DynamoDB developer guide, [Update expressions] and [Condition
//! expressions].
//!
//! [Update expressions]: https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Expressions.UpdateExpressions.html
//! [Condition expressions]: https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Expressions.ConditionExpressions.html

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use crate::lease::number;

/// What a `SET` action writes into its attribute.
#[derive(Debug, Clone, PartialEq)]
pub enum SetValue {
    /// `#a = :v`: the value.
    Value(AttributeValue),
    /// `#a = #a + :v`: the attribute's number plus `by`. DynamoDB fails the
    /// request (`ValidationException`) when the attribute is absent.
    Add(u64),
    /// `#a = if_not_exists(#a, :start) + :by`: the attribute's number, or
    /// `start` when it is absent, plus `by`.
    AddOrStart {
        /// The number an absent attribute counts as.
        start: u64,
        /// The increment.
        by: u64,
    },
    /// `#a = list_append(if_not_exists(#a, :empty), :elements)`: the
    /// attribute's list (`L`), or an empty one when it is absent, with
    /// `elements` appended. DynamoDB fails the request
    /// (`ValidationException`) when the attribute is not a list.
    Append(Vec<AttributeValue>),
}

/// The actions of an update: `SET` assignments, then `REMOVE`d attributes,
/// in the order they were added. An attribute appears at most once
/// (DynamoDB rejects an update whose paths overlap).
///
/// ```
/// use aws_sdk_dynamodb::types::AttributeValue;
/// use shard_lease::{Condition, Expressions, Update};
///
/// let update = Update::new()
///     .add("leaseCounter", 1)
///     .set("checkpoint", AttributeValue::S("SHARD_END".to_owned()))
///     .remove("pendingCheckpoint");
/// let rendered = Expressions::new(&update, &Condition::new());
/// assert_eq!(
///     rendered.update.as_deref(),
///     Some("SET #a0 = #a0 + :v0, #a1 = :v1 REMOVE #a2")
/// );
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Update {
    sets: Vec<(String, SetValue)>,
    removes: Vec<String>,
}

impl Update {
    /// An update with no action.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `SET attribute = value`.
    #[must_use]
    pub fn set(self, attribute: impl Into<String>, value: AttributeValue) -> Self {
        self.assign(attribute.into(), SetValue::Value(value))
    }

    /// Adds `SET attribute = attribute + by` (a number that must exist).
    #[must_use]
    pub fn add(self, attribute: impl Into<String>, by: u64) -> Self {
        self.assign(attribute.into(), SetValue::Add(by))
    }

    /// Adds `SET attribute = if_not_exists(attribute, start) + by`.
    #[must_use]
    pub fn add_or_start(self, attribute: impl Into<String>, start: u64, by: u64) -> Self {
        self.assign(attribute.into(), SetValue::AddOrStart { start, by })
    }

    /// Adds `SET attribute = list_append(if_not_exists(attribute, []),
    /// elements)`: `elements` appended to the list `attribute`, which is
    /// created when absent.
    #[must_use]
    pub fn append(self, attribute: impl Into<String>, elements: Vec<AttributeValue>) -> Self {
        self.assign(attribute.into(), SetValue::Append(elements))
    }

    /// Adds `REMOVE attribute`.
    #[must_use]
    pub fn remove(mut self, attribute: impl Into<String>) -> Self {
        let attribute = attribute.into();
        debug_assert!(!self.mentions(&attribute), "{attribute} appears twice");
        self.removes.push(attribute);
        self
    }

    /// The `SET` assignments, in order.
    pub fn sets(&self) -> &[(String, SetValue)] {
        &self.sets
    }

    /// The `REMOVE`d attributes, in order.
    pub fn removes(&self) -> &[String] {
        &self.removes
    }

    /// The value a `SET attribute = value` assigns; `None` when the update
    /// does not assign `attribute` a plain value.
    pub fn value_of(&self, attribute: &str) -> Option<&AttributeValue> {
        self.sets.iter().find_map(|(name, value)| match value {
            SetValue::Value(value) if name == attribute => Some(value),
            _ => None,
        })
    }

    fn assign(mut self, attribute: String, value: SetValue) -> Self {
        debug_assert!(!self.mentions(&attribute), "{attribute} appears twice");
        self.sets.push((attribute, value));
        self
    }

    fn mentions(&self, attribute: &str) -> bool {
        self.sets.iter().any(|(name, _)| name == attribute)
            || self.removes.iter().any(|name| name == attribute)
    }

    /// `SET a, b REMOVE c, d`; `None` for an update with no action.
    fn render(&self, placeholders: &mut Placeholders) -> Option<String> {
        let mut assignments = Vec::with_capacity(self.sets.len());
        for (attribute, value) in &self.sets {
            let name = placeholders.name(attribute);
            assignments.push(match value {
                SetValue::Value(value) => {
                    format!("{name} = {}", placeholders.value(value.clone()))
                }
                SetValue::Add(by) => format!("{name} = {name} + {}", placeholders.number(*by)),
                SetValue::AddOrStart { start, by } => format!(
                    "{name} = if_not_exists({name}, {}) + {}",
                    placeholders.number(*start),
                    placeholders.number(*by)
                ),
                SetValue::Append(elements) => format!(
                    "{name} = list_append(if_not_exists({name}, {}), {})",
                    placeholders.value(AttributeValue::L(Vec::new())),
                    placeholders.value(AttributeValue::L(elements.clone()))
                ),
            });
        }
        let removed: Vec<String> = self
            .removes
            .iter()
            .map(|attribute| placeholders.name(attribute))
            .collect();
        let mut clauses = Vec::new();
        if !assignments.is_empty() {
            clauses.push(format!("SET {}", assignments.join(", ")));
        }
        if !removed.is_empty() {
            clauses.push(format!("REMOVE {}", removed.join(", ")));
        }
        (!clauses.is_empty()).then(|| clauses.join(" "))
    }
}

/// One clause of a [`Condition`].
#[derive(Debug, Clone, PartialEq)]
pub enum Clause {
    /// `#a = :v`: the attribute exists and equals the value.
    Equals(String, AttributeValue),
    /// `attribute_not_exists(#a)`: the attribute is absent (or the item is).
    NotExists(String),
}

/// A condition: clauses joined by `AND`, in the order they were added; an
/// empty condition puts no condition on the write.
///
/// ```
/// use aws_sdk_dynamodb::types::AttributeValue;
/// use shard_lease::{Condition, Expressions, Update};
///
/// let condition = Condition::new()
///     .equals("leaseCounter", AttributeValue::N("7".to_owned()))
///     .equals_or_absent("leaseOwner", None);
/// let rendered = Expressions::new(&Update::new(), &condition);
/// assert_eq!(
///     rendered.condition.as_deref(),
///     Some("#a0 = :v0 AND attribute_not_exists(#a1)")
/// );
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Condition {
    clauses: Vec<Clause>,
}

impl Condition {
    /// No condition.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `attribute = value`.
    #[must_use]
    pub fn equals(mut self, attribute: impl Into<String>, value: AttributeValue) -> Self {
        self.clauses.push(Clause::Equals(attribute.into(), value));
        self
    }

    /// Adds `attribute_not_exists(attribute)`.
    #[must_use]
    pub fn not_exists(mut self, attribute: impl Into<String>) -> Self {
        self.clauses.push(Clause::NotExists(attribute.into()));
        self
    }

    /// Adds `attribute = value`, or `attribute_not_exists(attribute)` when
    /// `value` is `None`: the attribute is as it was observed.
    #[must_use]
    pub fn equals_or_absent(
        self,
        attribute: impl Into<String>,
        value: Option<AttributeValue>,
    ) -> Self {
        match value {
            Some(value) => self.equals(attribute, value),
            None => self.not_exists(attribute),
        }
    }

    /// The clauses, in order.
    pub fn clauses(&self) -> &[Clause] {
        &self.clauses
    }

    /// The value an `attribute = value` clause compares `attribute` with.
    pub fn expected(&self, attribute: &str) -> Option<&AttributeValue> {
        self.clauses.iter().find_map(|clause| match clause {
            Clause::Equals(name, value) if name == attribute => Some(value),
            _ => None,
        })
    }

    /// `a AND b AND …`; `None` for no condition.
    fn render(&self, placeholders: &mut Placeholders) -> Option<String> {
        let clauses: Vec<String> = self
            .clauses
            .iter()
            .map(|clause| match clause {
                Clause::Equals(attribute, value) => format!(
                    "{} = {}",
                    placeholders.name(attribute),
                    placeholders.value(value.clone())
                ),
                Clause::NotExists(attribute) => {
                    format!("attribute_not_exists({})", placeholders.name(attribute))
                }
            })
            .collect();
        (!clauses.is_empty()).then(|| clauses.join(" AND "))
    }
}

/// The expression fields of an `UpdateItem`, `PutItem` or `DeleteItem`
/// request, as the SDK's `set_…` builder methods take them. Every attribute
/// name is a `#aN` placeholder (so reserved words never matter), one per
/// attribute; every value is a `:vN` placeholder. A field is `None` when
/// empty: DynamoDB rejects an empty expression or placeholder map.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Expressions {
    /// `UpdateExpression`, e.g. `SET #a0 = #a0 + :v0 REMOVE #a1`.
    pub update: Option<String>,
    /// `ConditionExpression`, e.g. `#a0 = :v1 AND attribute_not_exists(#a2)`.
    pub condition: Option<String>,
    /// `ExpressionAttributeNames`: placeholder → attribute name.
    pub names: Option<HashMap<String, String>>,
    /// `ExpressionAttributeValues`: placeholder → value.
    pub values: Option<HashMap<String, AttributeValue>>,
}

impl Expressions {
    /// Renders `update` and `condition` (either may be empty) with one set
    /// of placeholders.
    pub fn new(update: &Update, condition: &Condition) -> Self {
        let mut placeholders = Placeholders::default();
        let update = update.render(&mut placeholders);
        let condition = condition.render(&mut placeholders);
        let Placeholders { names, values, .. } = placeholders;
        Self {
            update,
            condition,
            names: (!names.is_empty()).then_some(names),
            values: (!values.is_empty()).then_some(values),
        }
    }
}

/// Placeholders handed out while rendering: `#aN` per attribute name,
/// `:vN` per value.
#[derive(Default)]
struct Placeholders {
    names: HashMap<String, String>,
    by_attribute: HashMap<String, String>,
    values: HashMap<String, AttributeValue>,
}

impl Placeholders {
    fn name(&mut self, attribute: &str) -> String {
        if let Some(placeholder) = self.by_attribute.get(attribute) {
            return placeholder.clone();
        }
        let placeholder = format!("#a{}", self.names.len());
        self.names.insert(placeholder.clone(), attribute.to_owned());
        self.by_attribute
            .insert(attribute.to_owned(), placeholder.clone());
        placeholder
    }

    fn value(&mut self, value: AttributeValue) -> String {
        let placeholder = format!(":v{}", self.values.len());
        self.values.insert(placeholder.clone(), value);
        placeholder
    }

    fn number(&mut self, value: u64) -> String {
        self.value(number(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(text: &str) -> AttributeValue {
        AttributeValue::S(text.to_owned())
    }

    #[test]
    fn renders_every_form_with_placeholders() {
        let update = Update::new()
            .set("leaseOwner", s("me"))
            .add("leaseCounter", 1)
            .add_or_start("ownerSwitchesSinceCheckpoint", 0, 1)
            .remove("pendingCheckpoint")
            .remove("pendingBatchKey");
        let condition = Condition::new()
            .equals("leaseCounter", number(7))
            .not_exists("creationToken");
        let rendered = Expressions::new(&update, &condition);
        assert_eq!(
            rendered.update.as_deref(),
            Some(
                "SET #a0 = :v0, #a1 = #a1 + :v1, #a2 = if_not_exists(#a2, :v2) + :v3 \
                 REMOVE #a3, #a4"
            )
        );
        assert_eq!(
            rendered.condition.as_deref(),
            Some("#a1 = :v4 AND attribute_not_exists(#a5)")
        );
        let names = rendered.names.unwrap();
        assert_eq!(names.len(), 6);
        assert_eq!(names["#a1"], "leaseCounter");
        assert_eq!(names["#a5"], "creationToken");
        let values = rendered.values.unwrap();
        assert_eq!(values[":v0"], s("me"));
        assert_eq!(values[":v2"], number(0));
        assert_eq!(values[":v4"], number(7));
    }

    #[test]
    fn renders_a_list_append_that_starts_an_absent_list() {
        let update = Update::new().append("stagedBatches", vec![s("e")]);
        let rendered = Expressions::new(&update, &Condition::new());
        assert_eq!(
            rendered.update.as_deref(),
            Some("SET #a0 = list_append(if_not_exists(#a0, :v0), :v1)")
        );
        let values = rendered.values.unwrap();
        assert_eq!(values[":v0"], AttributeValue::L(vec![]));
        assert_eq!(values[":v1"], AttributeValue::L(vec![s("e")]));
    }

    #[test]
    fn empty_parts_are_left_out() {
        let rendered = Expressions::new(&Update::new(), &Condition::new().not_exists("leaseKey"));
        assert_eq!(rendered.update, None);
        assert_eq!(
            rendered.condition.as_deref(),
            Some("attribute_not_exists(#a0)")
        );
        assert_eq!(rendered.values, None, "DynamoDB rejects an empty map");
        let only_remove = Expressions::new(&Update::new().remove("x"), &Condition::new());
        assert_eq!(only_remove.update.as_deref(), Some("REMOVE #a0"));
        assert_eq!(only_remove.condition, None);
    }

    #[test]
    fn lookups_find_plain_values_only() {
        let update = Update::new().add("n", 1).set("s", s("x"));
        assert_eq!(update.value_of("s"), Some(&s("x")));
        assert_eq!(update.value_of("n"), None);
        let condition = Condition::new()
            .equals_or_absent("a", Some(s("y")))
            .equals_or_absent("b", None);
        assert_eq!(condition.expected("a"), Some(&s("y")));
        assert_eq!(condition.clauses()[1], Clause::NotExists("b".to_owned()));
    }
}
