//! The SDDS feeds read from the seller's data feed bucket, as AWS Marketplace lays
//! them out: `bucket/[prefix/]<FeedName>_V<n>/year=YYYY/month=MM/data.csv`, one file
//! per feed and month, each day appended to it. For `--month M` the Daily Usage
//! feed's file of M and of every later month (a day's usage is delivered the day
//! after, and a revision lands in the month it is made), and every monthly file of
//! the Account and Product feeds (their rows change rarely; the current month's file
//! may hold only the header, the history is in earlier months and the 2010 backfill).
//! Every call names the account the bucket must belong to (`ExpectedBucketOwner`), so
//! S3 refuses to serve a bucket of that name that another account holds (a deleted
//! bucket's name taken over) rather than hand us its files.

use std::collections::BTreeMap;

use aws_config::SdkConfig;
use aws_sdk_s3::error::ProvideErrorMetadata;
use awsmp_operate::reconcile::FeedFile;

use super::SddsFiles;

/// The Daily Usage feed's folder name, without its `_V<n>` version.
pub const USAGE_FEED_FOLDER: &str = "DailyUsageFeed";
/// The Account feed's folder name.
pub const ACCOUNT_FEED_FOLDER: &str = "AccountFeed";
/// The Product feed's folder name.
pub const PRODUCT_FEED_FOLDER: &str = "ProductFeed";
/// The file AWS writes in each month's folder.
pub const MONTH_FILE: &str = "data.csv";
/// ListObjectsV2's own maximum page.
pub const LIST_PAGE: i32 = 1000;

/// Why the feeds could not be read from the bucket, and what to do.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SddsS3Error {
    /// No such bucket.
    #[error(
        "bucket {bucket} does not exist: pass --sdds-bucket with the bucket named in the AWS Marketplace Management Portal's data feed configuration"
    )]
    NoBucket {
        /// The bucket.
        bucket: String,
    },
    /// The credentials lack a permission, or the bucket is not the expected owner's.
    #[error(
        "access denied: {operation} on {resource} was refused; {grant}{}",
        owner_hint(.expected_owner.as_deref())
    )]
    AccessDenied {
        /// The S3 call.
        operation: &'static str,
        /// The bucket or object.
        resource: String,
        /// Which permission to grant.
        grant: String,
        /// The owner the call named, when S3 would refuse a bucket of another owner
        /// with the same answer (not for a KMS refusal).
        expected_owner: Option<String>,
    },
    /// The prefix holds no folder of a feed.
    #[error(
        "no {feed} feed under s3://{bucket}/{prefix} (folders there: {found}): check --sdds-prefix, and that the data feeds are configured"
    )]
    NoFeed {
        /// The feed's folder name.
        feed: &'static str,
        /// The bucket.
        bucket: String,
        /// The prefix searched.
        prefix: String,
        /// What is there instead.
        found: String,
    },
    /// The feed has no file of the month.
    #[error(
        "no {feed} file for {month} under s3://{bucket}/{folder} (it is written daily at midnight UTC for the day before): check --month, or wait for the first delivery"
    )]
    NoMonthFile {
        /// The feed's folder name.
        feed: &'static str,
        /// The month `YYYY-MM`, or "any month".
        month: String,
        /// The bucket.
        bucket: String,
        /// The feed's folder.
        folder: String,
    },
    /// Any other failure of an S3 call.
    #[error("S3 {operation} on {resource}: {message}")]
    Call {
        /// The S3 call.
        operation: &'static str,
        /// The bucket or object.
        resource: String,
        /// What S3 or the network said.
        message: String,
    },
    /// A file is not UTF-8 text.
    #[error("s3://{bucket}/{key} is not UTF-8 text: is it a data feed CSV?")]
    NotText {
        /// The bucket.
        bucket: String,
        /// The key.
        key: String,
    },
}

/// The other reason S3 answers 403: the bucket is not `owner`'s.
fn owner_hint(owner: Option<&str>) -> String {
    owner.map_or_else(String::new, |owner| {
        format!(
            "; or the bucket is not owned by account {owner}, the owner awsmp expects (--sdds-bucket-owner; default: the main stack's account): S3 refuses every call naming another owner, so a bucket another account holds is never read"
        )
    })
}

/// One object of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Its key.
    pub key: String,
    /// When it was last written (seconds since the epoch), when S3 says.
    pub last_modified: Option<i64>,
}

/// A feed's folder among the `folders` under the prefix (names without the prefix
/// and the trailing `/`): `<feed>` or `<feed>_V<n>` in any case; of several versions
/// the highest (an unversioned folder counts as version 0).
pub fn feed_folder(folders: &[String], feed: &str) -> Option<String> {
    let feed = feed.to_ascii_lowercase();
    folders
        .iter()
        .filter_map(|name| {
            let lower = name.to_ascii_lowercase();
            let rest = lower.strip_prefix(&feed)?;
            let version = if rest.is_empty() {
                0
            } else {
                rest.strip_prefix("_v")?.parse::<u32>().ok()?
            };
            Some((version, name.clone()))
        })
        .max()
        .map(|(_, name)| name)
}

/// The `(year, month)` of a key's `year=YYYY/month=MM/` folders.
pub fn month_of_key(key: &str) -> Option<(i32, u32)> {
    let mut year = None;
    let mut month = None;
    for part in key.split('/') {
        if let Some(y) = part.strip_prefix("year=") {
            year = y.parse().ok();
        } else if let Some(m) = part.strip_prefix("month=") {
            month = m.parse().ok().filter(|m| (1..=12).contains(m));
        }
    }
    Some((year?, month?))
}

/// The file of each month among a feed's objects: `data.csv` when the month has one,
/// else its most recently written `.csv` (the feed writes one file per month; any
/// other CSV is a copy or a re-delivery, and the newest is the one to trust).
pub fn month_files(objects: &[Listed]) -> BTreeMap<(i32, u32), String> {
    let mut by_month: BTreeMap<(i32, u32), Vec<&Listed>> = BTreeMap::new();
    for object in objects {
        if !object.key.to_ascii_lowercase().ends_with(".csv") {
            continue;
        }
        if let Some(month) = month_of_key(&object.key) {
            by_month.entry(month).or_default().push(object);
        }
    }
    by_month
        .into_iter()
        .filter_map(|(month, objects)| {
            let data = objects
                .iter()
                .find(|o| o.key.rsplit('/').next() == Some(MONTH_FILE));
            let chosen = data.or_else(|| {
                objects
                    .iter()
                    .max_by(|a, b| (a.last_modified, &a.key).cmp(&(b.last_modified, &b.key)))
            })?;
            Some((month, chosen.key.clone()))
        })
        .collect()
}

/// What an S3 error means for the operator: `status` is the HTTP status, `code` and
/// `message` S3's error code and text (a HEAD answer has neither); `expected_owner` the
/// account the call named as the bucket's owner.
pub fn classify(
    operation: &'static str,
    resource: &str,
    status: Option<u16>,
    code: Option<&str>,
    message: Option<&str>,
    expected_owner: Option<&str>,
) -> SddsS3Error {
    let code = code.unwrap_or_default();
    let message = message.unwrap_or_default();
    let bucket = resource
        .trim_start_matches("arn:aws:s3:::")
        .split('/')
        .next()
        .unwrap_or(resource)
        .to_string();
    if code == "NoSuchBucket" || (operation == "HeadBucket" && status == Some(404)) {
        return SddsS3Error::NoBucket { bucket };
    }
    let denied = code == "AccessDenied" || code == "Forbidden" || status == Some(403);
    if denied || code.starts_with("KMS.") {
        let kms = code.starts_with("KMS.") || message.to_ascii_lowercase().contains("kms");
        let grant = if kms {
            format!(
                "the objects are encrypted with a KMS key: grant kms:Decrypt on that key (the bucket's default encryption names it) to these credentials ({message})"
            )
        } else if operation == "GetObject" {
            format!(
                "grant s3:GetObject on arn:aws:s3:::{bucket}/* (and kms:Decrypt on the bucket's KMS key, if it has one)"
            )
        } else {
            format!("grant s3:ListBucket on arn:aws:s3:::{bucket}")
        };
        return SddsS3Error::AccessDenied {
            operation,
            resource: resource.to_string(),
            grant,
            // An owner mismatch is refused before any KMS key is used.
            expected_owner: (!kms).then(|| expected_owner.map(str::to_string)).flatten(),
        };
    }
    let text = match (code, message) {
        ("", "") => format!("HTTP {}", status.map_or("?".into(), |s| s.to_string())),
        ("", m) => m.to_string(),
        (c, "") => c.to_string(),
        (c, m) => format!("{c}: {m}"),
    };
    SddsS3Error::Call {
        operation,
        resource: resource.to_string(),
        message: text,
    }
}

fn sdk_error<E>(
    operation: &'static str,
    resource: &str,
    expected_owner: &str,
    error: &aws_sdk_s3::error::SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
) -> SddsS3Error
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let status = error.raw_response().map(|r| r.status().as_u16());
    let message = error
        .message()
        .map(str::to_string)
        .unwrap_or_else(|| aws_sdk_s3::error::DisplayErrorContext(error).to_string());
    let message = match error {
        // No answer at all: what the connector said is the message.
        aws_sdk_s3::error::SdkError::DispatchFailure(_)
        | aws_sdk_s3::error::SdkError::TimeoutError(_) => message,
        // A HEAD answer has no body, so the SDK's text is only the status: drop it.
        _ if error.code().is_none() && error.message().is_none() => String::new(),
        _ => message,
    };
    classify(
        operation,
        resource,
        status,
        error.code(),
        (!message.is_empty()).then_some(message.as_str()),
        Some(expected_owner),
    )
}

/// The data feed bucket: a client, the bucket, the account that must own it and the
/// prefix the feeds are under.
#[derive(Debug, Clone)]
pub struct SddsBucket {
    client: aws_sdk_s3::Client,
    bucket: String,
    owner: String,
    prefix: String,
    page_size: i32,
}

/// An S3 client from `config`, in `region` when given; path-style addressing when
/// the config names an endpoint (an emulator: `AWS_ENDPOINT_URL`), since emulators
/// serve buckets at `endpoint/bucket`, not as a host name.
pub fn s3_client(config: &SdkConfig, region: Option<&str>) -> aws_sdk_s3::Client {
    let mut builder = aws_sdk_s3::config::Builder::from(config);
    if let Some(region) = region {
        builder = builder.region(aws_sdk_s3::config::Region::new(region.to_string()));
    }
    if config.endpoint_url().is_some() {
        builder = builder.force_path_style(true);
    }
    aws_sdk_s3::Client::from_conf(builder.build())
}

impl SddsBucket {
    /// Checks that `bucket` exists, is `owner`'s and can be listed (HeadBucket, which
    /// needs s3:ListBucket); a bucket in another Region than `config`'s is followed
    /// there. Every call then names `owner` as the bucket's expected owner.
    pub async fn open(
        config: &SdkConfig,
        bucket: &str,
        owner: &str,
        prefix: Option<&str>,
    ) -> Result<SddsBucket, SddsS3Error> {
        let mut client = s3_client(config, None);
        let resource = format!("arn:aws:s3:::{bucket}");
        let mut redirected = false;
        loop {
            match client
                .head_bucket()
                .bucket(bucket)
                .expected_bucket_owner(owner)
                .send()
                .await
            {
                Ok(_) => break,
                Err(e) => {
                    let region = e
                        .raw_response()
                        .and_then(|r| r.headers().get("x-amz-bucket-region"))
                        .map(str::to_string);
                    let current = client.config().region().map(|r| r.to_string());
                    match region {
                        Some(region) if !redirected && Some(&region) != current.as_ref() => {
                            client = s3_client(config, Some(&region));
                            redirected = true;
                        }
                        _ => return Err(sdk_error("HeadBucket", &resource, owner, &e)),
                    }
                }
            }
        }
        let prefix = prefix
            .map(|p| p.trim_matches('/'))
            .filter(|p| !p.is_empty())
            .map(|p| format!("{p}/"))
            .unwrap_or_default();
        Ok(SddsBucket {
            client,
            bucket: bucket.to_string(),
            owner: owner.to_string(),
            prefix,
            page_size: LIST_PAGE,
        })
    }

    /// Lists `page_size` keys a page (ListObjectsV2's maximum unless changed).
    pub fn with_page_size(mut self, page_size: i32) -> Self {
        self.page_size = page_size.clamp(1, LIST_PAGE);
        self
    }

    /// The bucket's name.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The account every call names as the bucket's owner.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Every page of ListObjectsV2 under `prefix`: the folders (with `delimiter`)
    /// and the objects.
    async fn list(
        &self,
        prefix: &str,
        delimiter: Option<&str>,
    ) -> Result<(Vec<String>, Vec<Listed>), SddsS3Error> {
        let resource = format!("arn:aws:s3:::{}", self.bucket);
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .expected_bucket_owner(&self.owner)
            .prefix(prefix)
            .set_delimiter(delimiter.map(str::to_string))
            .max_keys(self.page_size)
            .into_paginator()
            .send();
        let mut folders = Vec::new();
        let mut objects = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| sdk_error("ListObjectsV2", &resource, &self.owner, &e))?;
            folders.extend(
                page.common_prefixes()
                    .iter()
                    .filter_map(|p| p.prefix())
                    .map(str::to_string),
            );
            objects.extend(page.contents().iter().filter_map(|o| {
                Some(Listed {
                    key: o.key()?.to_string(),
                    last_modified: o.last_modified().map(|t| t.secs()),
                })
            }));
        }
        Ok((folders, objects))
    }

    async fn get(&self, key: &str) -> Result<String, SddsS3Error> {
        let resource = format!("arn:aws:s3:::{}/{key}", self.bucket);
        let out = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .expected_bucket_owner(&self.owner)
            .key(key)
            .send()
            .await
            .map_err(|e| sdk_error("GetObject", &resource, &self.owner, &e))?;
        let bytes = out
            .body
            .collect()
            .await
            .map_err(|e| SddsS3Error::Call {
                operation: "GetObject",
                resource: resource.clone(),
                message: format!("the download broke off: {e}"),
            })?
            .into_bytes();
        String::from_utf8(bytes.to_vec()).map_err(|_| SddsS3Error::NotText {
            bucket: self.bucket.clone(),
            key: key.to_string(),
        })
    }

    /// The three feeds' files for `month` (`(year, month)`), read as the module doc
    /// says; `progress` is told each key before it is read.
    pub async fn read_month(
        &self,
        month: (i32, u32),
        progress: &dyn Fn(&str),
    ) -> Result<SddsFiles, SddsS3Error> {
        let (folders, _) = self.list(&self.prefix, Some("/")).await?;
        let names: Vec<String> = folders
            .iter()
            .map(|f| {
                f.strip_prefix(&self.prefix)
                    .unwrap_or(f)
                    .trim_end_matches('/')
                    .to_string()
            })
            .collect();
        let month_text = format!("{:04}-{:02}", month.0, month.1);
        let mut feeds = Vec::new();
        for feed in [USAGE_FEED_FOLDER, ACCOUNT_FEED_FOLDER, PRODUCT_FEED_FOLDER] {
            let folder = feed_folder(&names, feed).ok_or_else(|| SddsS3Error::NoFeed {
                feed,
                bucket: self.bucket.clone(),
                prefix: self.prefix.clone(),
                found: if names.is_empty() {
                    "none".into()
                } else {
                    names.join(", ")
                },
            })?;
            let folder = format!("{}{folder}/", self.prefix);
            let (_, objects) = self.list(&folder, None).await?;
            let files = month_files(&objects);
            let keys: Vec<String> = if feed == USAGE_FEED_FOLDER {
                if !files.contains_key(&month) {
                    return Err(SddsS3Error::NoMonthFile {
                        feed,
                        month: month_text,
                        bucket: self.bucket.clone(),
                        folder,
                    });
                }
                files.range(month..).map(|(_, k)| k.clone()).collect()
            } else {
                if files.is_empty() {
                    return Err(SddsS3Error::NoMonthFile {
                        feed,
                        month: "any month".into(),
                        bucket: self.bucket.clone(),
                        folder,
                    });
                }
                files.into_values().collect()
            };
            let mut read = Vec::new();
            for key in keys {
                progress(&key);
                let text = self.get(&key).await?;
                read.push(FeedFile { name: key, text });
            }
            feeds.push(read);
        }
        let product = feeds.pop().unwrap_or_default();
        let account = feeds.pop().unwrap_or_default();
        let daily_usage = feeds.pop().unwrap_or_default();
        Ok(SddsFiles {
            daily_usage,
            account,
            product,
            source: format!("s3://{}/{}", self.bucket, self.prefix),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn finds_each_feeds_newest_version_in_any_case() {
        let folders: Vec<String> = [
            "AccountFeed_V1",
            "accountfeed_v2",
            "AgreementFeed",
            "DailyUsageFeed_V1",
            "ProductFeed",
            "ProductFeedX_V9",
        ]
        .map(String::from)
        .into();
        assert_eq!(
            feed_folder(&folders, ACCOUNT_FEED_FOLDER).as_deref(),
            Some("accountfeed_v2")
        );
        assert_eq!(
            feed_folder(&folders, USAGE_FEED_FOLDER).as_deref(),
            Some("DailyUsageFeed_V1")
        );
        assert_eq!(
            feed_folder(&folders, PRODUCT_FEED_FOLDER).as_deref(),
            Some("ProductFeed"),
            "unversioned; ProductFeedX is another feed"
        );
        assert_eq!(feed_folder(&folders, "OfferFeed"), None);
    }

    #[test]
    fn picks_data_csv_else_the_newest_csv_of_each_month() {
        let listed = |key: &str, at: i64| Listed {
            key: key.into(),
            last_modified: Some(at),
        };
        let objects = [
            listed("F_V1/year=2026/month=03/data.csv", 1),
            listed("F_V1/year=2026/month=03/copy.csv", 9),
            listed("F_V1/year=2026/month=04/old.csv", 5),
            listed("F_V1/year=2026/month=04/new.csv", 7),
            listed("F_V1/year=2026/month=05/notes.txt", 7),
            listed("F_V1/year=2026/month=13/data.csv", 7),
            listed("F_V1/data.csv", 7),
        ];
        let files = month_files(&objects);
        assert_eq!(
            files.into_iter().collect::<Vec<_>>(),
            vec![
                ((2026, 3), "F_V1/year=2026/month=03/data.csv".to_string()),
                ((2026, 4), "F_V1/year=2026/month=04/new.csv".to_string()),
            ]
        );
    }

    #[test]
    fn errors_name_the_permission_to_grant() {
        let bucket = "arn:aws:s3:::feeds";
        let object = "arn:aws:s3:::feeds/DailyUsageFeed_V1/year=2026/month=03/data.csv";
        // (operation, resource, HTTP status, error code, message, what the error says)
        type Case<'a> = (
            &'static str,
            &'a str,
            Option<u16>,
            Option<&'a str>,
            Option<&'a str>,
            &'a str,
        );
        let cases: &[Case] = &[
            (
                "HeadBucket",
                bucket,
                Some(404),
                None,
                None,
                "bucket feeds does not exist",
            ),
            (
                "ListObjectsV2",
                bucket,
                Some(404),
                Some("NoSuchBucket"),
                None,
                "bucket feeds does not exist",
            ),
            (
                "HeadBucket",
                bucket,
                Some(403),
                None,
                None,
                "grant s3:ListBucket on arn:aws:s3:::feeds",
            ),
            (
                "ListObjectsV2",
                bucket,
                Some(403),
                Some("AccessDenied"),
                Some("Access Denied"),
                "grant s3:ListBucket on arn:aws:s3:::feeds",
            ),
            (
                "GetObject",
                object,
                Some(403),
                Some("AccessDenied"),
                Some("Access Denied"),
                "grant s3:GetObject on arn:aws:s3:::feeds/*",
            ),
            (
                "GetObject",
                object,
                Some(403),
                Some("AccessDenied"),
                Some("User: arn:aws:iam::1:user/op is not authorized to perform: kms:Decrypt"),
                "grant kms:Decrypt on that key",
            ),
            (
                "GetObject",
                object,
                Some(400),
                Some("KMS.DisabledException"),
                Some("key is disabled"),
                "grant kms:Decrypt",
            ),
            (
                "GetObject",
                object,
                Some(500),
                Some("InternalError"),
                Some("try again"),
                "S3 GetObject on arn:aws:s3:::feeds/DailyUsageFeed_V1/year=2026/month=03/data.csv: InternalError: try again",
            ),
        ];
        for (operation, resource, status, code, message, needle) in cases {
            let text = classify(operation, resource, *status, *code, *message, None).to_string();
            assert!(
                text.contains(needle),
                "{operation} {status:?} {code:?}: {text}"
            );
        }
    }

    /// S3 answers a call naming another owner as it answers a missing permission (403
    /// AccessDenied, or a bare 403 to a HEAD): both causes are said, the owner named.
    #[test]
    fn a_refusal_names_the_owner_the_call_expected() {
        let bucket = "arn:aws:s3:::feeds";
        let object = "arn:aws:s3:::feeds/DailyUsageFeed_V1/year=2026/month=03/data.csv";
        let owner = Some("111122223333");
        for (operation, resource, code, message) in [
            ("HeadBucket", bucket, None, None),
            (
                "ListObjectsV2",
                bucket,
                Some("AccessDenied"),
                Some("Access Denied"),
            ),
            (
                "GetObject",
                object,
                Some("AccessDenied"),
                Some("Access Denied"),
            ),
        ] {
            let error = classify(operation, resource, Some(403), code, message, owner);
            assert!(
                matches!(&error, SddsS3Error::AccessDenied { expected_owner: Some(o), .. } if o == "111122223333"),
                "{error:?}"
            );
            let text = error.to_string();
            assert!(text.contains("grant s3:"), "{text}");
            assert!(
                text.contains("or the bucket is not owned by account 111122223333"),
                "{text}"
            );
            assert!(text.contains("--sdds-bucket-owner"), "{text}");
        }
        // A KMS refusal comes after the owner check passed: no owner hint.
        let kms = classify(
            "GetObject",
            object,
            Some(403),
            Some("AccessDenied"),
            Some("not authorized to perform: kms:Decrypt"),
            owner,
        );
        assert!(!kms.to_string().contains("not owned"), "{kms}");
    }

    #[test]
    fn months_are_read_from_keys() {
        assert_eq!(
            month_of_key("p/DailyUsageFeed_V1/year=2026/month=03/data.csv"),
            Some((2026, 3))
        );
        assert_eq!(month_of_key("DailyUsageFeed_V1/year=2026/data.csv"), None);
        assert_eq!(month_of_key("x/year=2026/month=00/data.csv"), None);
    }
}
