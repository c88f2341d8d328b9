//! Reading decisions objects back: a decisions object's name
//! ([`parse_decisions_name`]) and its lines ([`parse`], [`parse_line`]),
//! as `events::decisions` writes them — for a replay that adopts a batch's
//! decisions, a rebuild of the event window, and `verify`.

use std::sync::Arc;

use sequence_range::{SequenceNumber, SequenceRange};

use crate::events::decisions::{DECISIONS_EXTENSION, Line, RecordedDecision, UserDecision};
use crate::events::rule::{CopyRef, Decision, EventKey, Outcome};
use crate::output::key::{KeyParseError, parse_named};

/// The batch range a decisions object's name (last key segment) says.
///
/// # Errors
/// [`KeyParseError`] for a name shardsink does not write.
pub fn parse_decisions_name(name: &str) -> Result<SequenceRange, KeyParseError> {
    parse_named(name, DECISIONS_EXTENSION)
}

/// Reads a decisions body (uncompressed) of `shard_id`'s batch.
///
/// # Errors
/// A sentence naming the first line that does not parse.
pub fn parse(shard_id: &str, body: &[u8]) -> Result<Vec<RecordedDecision>, String> {
    let shard: Arc<str> = Arc::from(shard_id);
    body.split(|b| *b == b'\n')
        .filter(|line| !line.is_empty())
        .enumerate()
        .map(|(n, line)| parse_line(&shard, n + 1, line))
        .collect()
}

/// Reads the `number`-th line (from 1, empty lines not counted; for the
/// error) of a decisions body of `shard`'s batch, without its newline.
///
/// # Errors
/// A sentence naming the line when it does not parse.
pub fn parse_line(
    shard: &Arc<str>,
    number: usize,
    line: &[u8],
) -> Result<RecordedDecision, String> {
    let n = number;
    let sequence_number = |text: &str| {
        SequenceNumber::parse(text).map_err(|err| format!("sequence number {text:?}: {err}"))
    };
    let line: Line =
        serde_json::from_slice(line).map_err(|err| format!("decisions line {n}: {err}"))?;
    let key = match (&line.event_id_hash, &line.payload_hash) {
        (Some(id), Some(fingerprint)) => Some(EventKey {
            id: u128::from_str_radix(id, 16)
                .map_err(|err| format!("decisions line {n}: eventIdHash: {err}"))?,
            fingerprint: u64::from_str_radix(fingerprint, 16)
                .map_err(|err| format!("decisions line {n}: payloadHash: {err}"))?,
        }),
        _ => None,
    };
    let outcome = Outcome::from_str_label(&line.outcome)
        .ok_or_else(|| format!("decisions line {n}: outcome {:?}", line.outcome))?;
    let decision = match (outcome, line.duplicate_of) {
        (Outcome::Duplicate, Some(of)) => Decision::Duplicate {
            of: CopyRef {
                shard_id: Arc::from(of.shard_id.as_str()),
                sequence_number: sequence_number(&of.sequence_number)?,
                sub_sequence_number: of.sub_sequence_number,
            },
        },
        (Outcome::Duplicate, None) => {
            return Err(format!(
                "decisions line {n}: a duplicate without duplicateOf"
            ));
        }
        (outcome, _) => Decision::Keep(outcome),
    };
    Ok(RecordedDecision {
        copy: CopyRef {
            shard_id: shard.clone(),
            sequence_number: sequence_number(&line.sequence_number)?,
            sub_sequence_number: line.sub_sequence_number,
        },
        arrival_millis: line.approximate_arrival_timestamp,
        decision: UserDecision { key, decision },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::decisions::encode_line;
    use crate::read::record::UserRecordView;

    fn view(sub: Option<u64>) -> UserRecordView<'static> {
        UserRecordView {
            shard_id: "shardId-000000000002",
            sequence_number: "49590338271490256608559692538361571095921575989136588898",
            sub_sequence_number: sub,
            partition_key: "pk",
            arrival_millis: 1_795_238_823_045,
            data: b"{}",
        }
    }

    #[test]
    fn lines_read_back_as_written() {
        let key = EventKey {
            id: u128::MAX - 5,
            fingerprint: 17,
        };
        let of = CopyRef {
            shard_id: Arc::from("shardId-000000000001"),
            sequence_number: SequenceNumber::from(12u64),
            sub_sequence_number: Some(3),
        };
        let decisions = [
            (
                view(None),
                UserDecision {
                    key: Some(key),
                    decision: Decision::Keep(Outcome::Expired),
                },
            ),
            (
                view(Some(0)),
                UserDecision {
                    key: Some(key),
                    decision: Decision::Duplicate { of: of.clone() },
                },
            ),
            (
                view(Some(1)),
                UserDecision {
                    key: None,
                    decision: Decision::Keep(Outcome::IdMissing),
                },
            ),
        ];
        let mut body = Vec::new();
        for (user, decision) in &decisions {
            encode_line(user, decision, &mut body);
        }
        let read = parse("shardId-000000000002", &body).unwrap();
        assert_eq!(read.len(), 3);
        for ((user, decision), read) in decisions.iter().zip(&read) {
            assert_eq!(&read.decision, decision);
            assert_eq!(read.copy.sequence_number.as_str(), user.sequence_number);
            assert_eq!(read.copy.sub_sequence_number, user.sub_sequence_number);
            assert_eq!(read.arrival_millis, user.arrival_millis);
        }
        assert_eq!(read[0].accepted().unwrap().fingerprint, 17);
        assert_eq!(read[1].accepted(), None);
        assert_eq!(read[2].accepted(), None);
        assert!(parse("s", b"{\"outcome\":\"duplicate\"}\n").is_err());
    }
}
