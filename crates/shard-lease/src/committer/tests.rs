use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::error::ConditionalCheckFailedException;
use aws_smithy_mocks::{RuleMode, mock, mock_client};
use aws_smithy_types::error::ErrorMetadata;

use super::*;
use crate::test_util::{FakeTable, fake_client, parse_update_item};
use crate::{Checkpoint, CreateOutcome, Lease};

fn fake_table() -> (Arc<FakeTable>, LeaseTable) {
    let fake = Arc::new(FakeTable::default());
    let table = LeaseTable::new(fake_client(fake.clone()), "leases");
    (fake, table)
}

fn is_committer_lost(err: &LeaseError) -> bool {
    matches!(err, LeaseError::LeaseLost { shard_id } if shard_id == COMMITTER_KEY)
}

#[tokio::test]
async fn the_first_take_creates_the_row_and_a_second_creation_loses() {
    let (_, table) = fake_table();
    assert_eq!(table.get_committer().await.unwrap(), None);
    let created = table.take_committer(None, "worker-a").await.unwrap();
    assert_eq!(created.owner.as_deref(), Some("worker-a"));
    assert_eq!((created.counter, created.committed.as_deref()), (1, None));
    assert_eq!(table.get_committer().await.unwrap(), Some(created));
    let late = table.take_committer(None, "worker-b").await.unwrap_err();
    assert!(is_committer_lost(&late), "{late:?}");
}

#[tokio::test]
async fn a_take_after_expiry_fences_out_the_old_committer() {
    let (_, table) = fake_table();
    let a = table.take_committer(None, "worker-a").await.unwrap();
    let a = table.renew_committer(&a, "worker-a").await.unwrap();
    assert_eq!(a.counter, 2);
    let published = table
        .publish_committed(&a, "worker-a", r#"{"snapshot":1}"#)
        .await
        .unwrap();
    assert_eq!(published.committed.as_deref(), Some(r#"{"snapshot":1}"#));
    assert_eq!(published.counter, 3);

    // worker-b saw counter 3 stand still for the failover time.
    let observed = table.get_committer().await.unwrap().unwrap();
    let b = table
        .take_committer(Some(&observed), "worker-b")
        .await
        .unwrap();
    assert_eq!((b.owner.as_deref(), b.counter), (Some("worker-b"), 4));
    assert_eq!(
        b.committed.as_deref(),
        Some(r#"{"snapshot":1}"#),
        "what was published stays"
    );

    let renew = table
        .renew_committer(&published, "worker-a")
        .await
        .unwrap_err();
    assert!(is_committer_lost(&renew), "{renew:?}");
    let publish = table
        .publish_committed(&published, "worker-a", r#"{"snapshot":2}"#)
        .await
        .unwrap_err();
    assert!(is_committer_lost(&publish), "{publish:?}");
    // A stale observation cannot take it either.
    let stale = table
        .take_committer(Some(&observed), "worker-c")
        .await
        .unwrap_err();
    assert!(is_committer_lost(&stale), "{stale:?}");

    let b = table
        .publish_committed(&b, "worker-b", r#"{"snapshot":2}"#)
        .await
        .unwrap();
    assert_eq!(table.get_committer().await.unwrap(), Some(b.clone()));
    assert_eq!(b.committed.as_deref(), Some(r#"{"snapshot":2}"#));
}

#[tokio::test]
async fn the_owner_is_checked_not_only_the_counter() {
    let (_, table) = fake_table();
    let a = table.take_committer(None, "worker-a").await.unwrap();
    let err = table.renew_committer(&a, "worker-b").await.unwrap_err();
    assert!(is_committer_lost(&err), "{err:?}");
    assert_eq!(table.get_committer().await.unwrap(), Some(a));
}

#[tokio::test]
async fn scans_report_the_committer_row_apart_from_the_leases() {
    let (fake, table) = fake_table();
    let lease = Lease::new("shardId-000000000000", Checkpoint::TrimHorizon, vec![]);
    let CreateOutcome::Created(created) = table.create_lease(&lease).await.unwrap() else {
        panic!("the table is empty")
    };
    table.heartbeat("worker-a", 1).await.unwrap();
    let committer = table.take_committer(None, "worker-a").await.unwrap();
    // A row of a later version's, under the same prefix.
    fake.items.lock().unwrap().insert(
        "iceberg#other".to_owned(),
        HashMap::from([(
            attr::LEASE_KEY.to_owned(),
            AttributeValue::S("iceberg#other".to_owned()),
        )]),
    );
    let scan = table.scan().await.unwrap();
    assert_eq!(scan.leases, [*created.clone()]);
    assert_eq!(scan.workers.len(), 1);
    assert_eq!(scan.committer, Some(committer));
    assert_eq!(table.list_leases().await.unwrap(), [*created]);
}

fn condition_failed() -> UpdateItemError {
    UpdateItemError::ConditionalCheckFailedException(
        ConditionalCheckFailedException::builder()
            .meta(
                ErrorMetadata::builder()
                    .code("ConditionalCheckFailedException")
                    .build(),
            )
            .build(),
    )
}

/// A publish whose condition failed, and a re-read row showing its effect
/// with the write's own token or another process's.
async fn publish_then_reread(own_token: bool) -> Result<CommitterLease, LeaseError> {
    let sent: Arc<Mutex<Option<String>>> = Arc::default();
    let (record, read) = (sent.clone(), sent);
    let update = mock!(Client::update_item)
        .match_requests(move |input| {
            let (update, _) = parse_update_item(input).unwrap();
            let token = update.value_of(attr::LAST_WRITE_TOKEN).unwrap().as_s();
            *record.lock().unwrap() = token.ok().cloned();
            true
        })
        .then_error(condition_failed);
    let get = mock!(Client::get_item).then_output(move || {
        let token = match own_token {
            true => read.lock().unwrap().clone(),
            false => Some("another-process".to_owned()),
        };
        let row = CommitterLease {
            owner: Some("worker-a".to_owned()),
            counter: 8,
            committed: Some("{}".to_owned()),
            last_write_token: token,
        };
        let mut item = HashMap::from([
            (
                attr::LEASE_KEY.to_owned(),
                AttributeValue::S(COMMITTER_KEY.to_owned()),
            ),
            (attr::LEASE_COUNTER.to_owned(), number(row.counter)),
            (
                attr::LEASE_OWNER.to_owned(),
                AttributeValue::S("worker-a".to_owned()),
            ),
            (
                committer_attr::COMMITTED.to_owned(),
                AttributeValue::S("{}".to_owned()),
            ),
        ]);
        if let Some(token) = row.last_write_token {
            item.insert(attr::LAST_WRITE_TOKEN.to_owned(), AttributeValue::S(token));
        }
        GetItemOutput::builder().set_item(Some(item)).build()
    });
    let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&update, &get]);
    let table = LeaseTable::new(client, "leases");
    let held = CommitterLease {
        owner: Some("worker-a".to_owned()),
        counter: 7,
        committed: None,
        last_write_token: None,
    };
    table.publish_committed(&held, "worker-a", "{}").await
}

#[tokio::test]
async fn a_publish_whose_response_was_lost_is_found_applied() {
    let applied = publish_then_reread(true).await.unwrap();
    assert_eq!(
        (applied.counter, applied.committed.as_deref()),
        (8, Some("{}"))
    );
    let err = publish_then_reread(false).await.unwrap_err();
    assert!(is_committer_lost(&err), "{err:?}");
}
