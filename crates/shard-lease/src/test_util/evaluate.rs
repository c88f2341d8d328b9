//! [`holds`] and [`apply`]: a [`Condition`] and an [`Update`] evaluated
//! against a DynamoDB item as DynamoDB evaluates them (developer guide:
//! "Condition expressions", "Update expressions").

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use super::ExpressionError;
use crate::{Clause, Condition, SetValue, Update};

/// Whether `condition` holds for `item`; `None` is a missing item, where
/// every attribute is absent. An empty condition always holds.
pub fn holds(condition: &Condition, item: Option<&HashMap<String, AttributeValue>>) -> bool {
    condition.clauses().iter().all(|clause| match clause {
        Clause::Equals(attribute, value) => {
            item.and_then(|item| item.get(attribute)) == Some(value)
        }
        Clause::NotExists(attribute) => item.is_none_or(|item| !item.contains_key(attribute)),
    })
}

/// Applies `update` to `item`: every right-hand side is computed from the
/// item as it was, then the assignments and removals are made. On an error
/// the item is left as it was.
///
/// # Errors
/// [`ExpressionError::Absent`] for `#a = #a + :v` on an item without `#a`;
/// [`ExpressionError::NotANumber`] when the attribute added to is not a
/// whole non-negative number, or the sum overflows;
/// [`ExpressionError::NotAList`] when the attribute appended to is not a
/// list.
pub fn apply(
    update: &Update,
    item: &mut HashMap<String, AttributeValue>,
) -> Result<(), ExpressionError> {
    let mut assigned = Vec::with_capacity(update.sets().len());
    for (attribute, value) in update.sets() {
        let sum = |base: u64, by: u64| {
            base.checked_add(by)
                .map(|sum| AttributeValue::N(sum.to_string()))
                .ok_or_else(|| ExpressionError::NotANumber(attribute.clone()))
        };
        let new = match value {
            SetValue::Value(value) => value.clone(),
            SetValue::Add(by) => match item.get(attribute) {
                Some(current) => sum(whole_number(attribute, current)?, *by)?,
                None => return Err(ExpressionError::Absent(attribute.clone())),
            },
            SetValue::AddOrStart { start, by } => {
                let base = match item.get(attribute) {
                    Some(current) => whole_number(attribute, current)?,
                    None => *start,
                };
                sum(base, *by)?
            }
            SetValue::Append(elements) => match item.get(attribute) {
                None => AttributeValue::L(elements.clone()),
                Some(AttributeValue::L(current)) => {
                    AttributeValue::L(current.iter().chain(elements).cloned().collect())
                }
                Some(_) => return Err(ExpressionError::NotAList(attribute.clone())),
            },
        };
        assigned.push((attribute.clone(), new));
    }
    item.extend(assigned);
    for attribute in update.removes() {
        item.remove(attribute);
    }
    Ok(())
}

fn whole_number(attribute: &str, value: &AttributeValue) -> Result<u64, ExpressionError> {
    value
        .as_n()
        .ok()
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| ExpressionError::NotANumber(attribute.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(value: u64) -> AttributeValue {
        AttributeValue::N(value.to_string())
    }

    #[test]
    fn conditions_compare_and_test_absence() {
        let item = HashMap::from([("c".to_owned(), n(3))]);
        let counter_is = |v| Condition::new().equals("c", n(v));
        assert!(holds(&counter_is(3), Some(&item)));
        assert!(!holds(&counter_is(4), Some(&item)));
        assert!(!holds(&counter_is(3), None));
        assert!(holds(&Condition::new().not_exists("o"), Some(&item)));
        assert!(holds(&Condition::new().not_exists("c"), None));
        assert!(!holds(&counter_is(3).not_exists("c"), Some(&item)));
        assert!(holds(&Condition::new(), None));
    }

    #[test]
    fn updates_set_add_and_remove() {
        let mut item = HashMap::from([("c".to_owned(), n(3)), ("p".to_owned(), n(1))]);
        let update = Update::new()
            .add("c", 1)
            .add_or_start("s", 0, 1)
            .set("o", AttributeValue::S("me".to_owned()))
            .remove("p");
        apply(&update, &mut item).unwrap();
        assert_eq!(
            item,
            HashMap::from([
                ("c".to_owned(), n(4)),
                ("s".to_owned(), n(1)),
                ("o".to_owned(), AttributeValue::S("me".to_owned())),
            ])
        );
        let before = item.clone();
        assert_eq!(
            apply(&Update::new().set("x", n(1)).add("missing", 1), &mut item),
            Err(ExpressionError::Absent("missing".to_owned()))
        );
        assert_eq!(item, before, "a failed update changes nothing");
        assert_eq!(
            apply(&Update::new().add("o", 1), &mut item),
            Err(ExpressionError::NotANumber("o".to_owned()))
        );
    }

    #[test]
    fn appends_start_an_absent_list_and_extend_a_present_one() {
        let s = |text: &str| AttributeValue::S(text.to_owned());
        let mut item = HashMap::from([("o".to_owned(), s("me"))]);
        let append = |text: &str| Update::new().append("l", vec![s(text)]);
        apply(&append("a"), &mut item).unwrap();
        apply(&append("b"), &mut item).unwrap();
        assert_eq!(item["l"], AttributeValue::L(vec![s("a"), s("b")]));
        assert_eq!(
            apply(&Update::new().append("o", vec![s("x")]), &mut item),
            Err(ExpressionError::NotAList("o".to_owned()))
        );
    }
}
