//! Keys in the bucket that do not parse are logged and ignored, never read
//! as ranges: objects planted in the very minute prefixes the daemon lists
//! for the resume skip must neither hide records (a parser that reads `9-1-99999999`
//! as the range 1..99999999 would skip everything) nor be touched.

use std::collections::BTreeSet;

use shardsink_e2e::archive::{get_object, put_object, truncate_to_minute};
use shardsink_e2e::producer::small_record_specs;
use shardsink_e2e::stream::read_stream;
use shardsink_e2e::{Daemon, Finish, Scenario, Versioning, require_env};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unparsable_keys_are_ignored() {
    let env = require_env!();
    let scenario = Scenario::create(&env, "foreign", 2, Versioning::Off)
        .await
        .unwrap();
    let produced = scenario
        .put(&small_record_specs(500, 6, "foreign"))
        .await
        .unwrap();

    // Plant foreign objects in every (minute, shard) prefix the records use.
    let truth = read_stream(&env, &scenario.stream).await.unwrap();
    let prefixes: BTreeSet<String> = truth
        .records
        .iter()
        .map(|r| {
            format!(
                "{}/{}/{}",
                scenario.settings.prefix(),
                truncate_to_minute(r.approximate_arrival_timestamp).format("%Y/%m/%d/%H/%M"),
                r.shard_id
            )
        })
        .collect();
    let mut planted = Vec::new();
    for prefix in &prefixes {
        for name in [
            "notes.txt",
            "9-1-99999999.jsonl",
            "998-0011-0029.jsonl",
            "0011-00899999999.jsonl",
            "-.jsonl",
            "sub/dir/99789-00210-00210.jsonl",
        ] {
            let key = format!("{prefix}/{name}");
            put_object(&env, &scenario.bucket, &key, b"not a batch\n".to_vec())
                .await
                .unwrap();
            planted.push(key);
        }
    }

    let settings = scenario
        .settings
        .clone()
        .set("buffer-max-records", "100")
        .set("buffer-max-age", "2s");
    let mut daemon = Daemon::spawn(&settings).unwrap();
    let mut reader = scenario.archive_reader();
    let how = Finish::stopping(&mut daemon, 90).planted(&planted);
    scenario.finish(&mut reader, &produced, how).await;
    for key in &planted {
        let body = get_object(&env, &scenario.bucket, key).await.unwrap();
        assert_eq!(
            body.as_deref(),
            Some(&b"not a batch\n"[..]),
            "{key} was changed or removed"
        );
    }
}
