//! Whole numbers as JSON writes them: `30` or `30.0`. JSON Schema's `integer` (what the
//! OpenAPI document says) counts both, so request bodies take both; a fraction or a number out
//! of the target type's range is refused. Serde `deserialize_with` functions, used by the API's
//! request types and the settings they carry.

use serde::de::Error;

/// The number as a `u64`, or why not.
fn parse(number: &serde_json::Number) -> Result<u64, String> {
    if let Some(whole) = number.as_u64() {
        return Ok(whole);
    }
    match number.as_f64() {
        // 2^53: past it a float no longer names one whole number.
        Some(float) if float.fract() == 0.0 && (0.0..=9_007_199_254_740_992.0).contains(&float) => {
            Ok(float as u64)
        }
        _ => Err(format!("expected a whole number, not {number}")),
    }
}

/// An optional `u32`.
pub fn optional_u32<'de, D>(deserializer: D) -> Result<Option<u32>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let Some(number) =
        <Option<serde_json::Number> as serde::Deserialize>::deserialize(deserializer)?
    else {
        return Ok(None);
    };
    let whole = parse(&number).map_err(D::Error::custom)?;
    u32::try_from(whole)
        .map(Some)
        .map_err(|_| D::Error::custom(format!("{number} is out of range")))
}

/// A required `u64`.
pub fn u64<'de, D>(deserializer: D) -> Result<u64, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let number = <serde_json::Number as serde::Deserialize>::deserialize(deserializer)?;
    parse(&number).map_err(D::Error::custom)
}

#[cfg(test)]
mod tests {
    #[derive(serde::Deserialize)]
    struct Both {
        #[serde(default, deserialize_with = "super::optional_u32")]
        small: Option<u32>,
        #[serde(deserialize_with = "super::u64")]
        big: u64,
    }

    fn read(json: &str) -> Result<(Option<u32>, u64), String> {
        serde_json::from_str::<Both>(json)
            .map(|both| (both.small, both.big))
            .map_err(|error| error.to_string())
    }

    #[test]
    fn whole_floats_count_and_fractions_do_not() {
        assert_eq!(read(r#"{"big": 23153.0}"#), Ok((None, 23153)));
        assert_eq!(read(r#"{"small": 30.0, "big": 7}"#), Ok((Some(30), 7)));
        assert!(read(r#"{"big": 1.5}"#)
            .unwrap_err()
            .contains("whole number"));
        assert!(read(r#"{"big": -1}"#).unwrap_err().contains("whole number"));
        assert!(read(r#"{"small": 4294967296, "big": 1}"#)
            .unwrap_err()
            .contains("out of range"));
        assert!(read(r#"{"small": null, "big": 1}"#).is_ok());
    }
}
