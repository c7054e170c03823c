//! An error code as it travels in the API's error envelope. The server only ever sends an
//! [`ErrorCode`]; a client built before a newer server reads a code it does not know as
//! [`WireCode::Unknown`] and still shows it, instead of failing to read the envelope. The code
//! strings themselves are written only in `crate::error_code`.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error_code::ErrorCode;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireCode {
    Known(ErrorCode),
    /// A code this build does not know (only reading an answer makes one).
    Unknown(UnknownCode),
}

/// The text of a code this build does not know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownCode(String);

impl WireCode {
    /// The code as the contract spells it (or as the server sent it).
    pub fn as_str(&self) -> &str {
        match self {
            WireCode::Known(code) => code.as_str(),
            WireCode::Unknown(UnknownCode(text)) => text,
        }
    }

    pub fn known(&self) -> Option<ErrorCode> {
        match self {
            WireCode::Known(code) => Some(*code),
            WireCode::Unknown(_) => None,
        }
    }
}

impl From<ErrorCode> for WireCode {
    fn from(code: ErrorCode) -> WireCode {
        WireCode::Known(code)
    }
}

impl PartialEq<ErrorCode> for WireCode {
    fn eq(&self, other: &ErrorCode) -> bool {
        self.known() == Some(*other)
    }
}

impl fmt::Display for WireCode {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

impl Serialize for WireCode {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            WireCode::Known(code) => code.serialize(serializer),
            WireCode::Unknown(UnknownCode(text)) => serializer.serialize_str(text),
        }
    }
}

impl<'de> Deserialize<'de> for WireCode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<WireCode, D::Error> {
        let text = String::deserialize(deserializer)?;
        Ok(
            match ErrorCode::ALL.iter().find(|code| code.as_str() == text) {
                Some(code) => WireCode::Known(*code),
                None => WireCode::Unknown(UnknownCode(text)),
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_codes_round_trip_and_unknown_ones_are_kept() {
        for code in ErrorCode::ALL {
            let text = serde_json::to_string(&WireCode::from(code)).unwrap();
            assert_eq!(text, serde_json::to_string(&code).unwrap());
            let back: WireCode = serde_json::from_str(&text).unwrap();
            assert_eq!(back, code);
        }
        let newer: WireCode = serde_json::from_str("\"QUOTA_EXCEEDED\"").unwrap();
        assert_eq!(newer.known(), None);
        assert_eq!(newer.to_string(), "QUOTA_EXCEEDED");
        assert_eq!(serde_json::to_string(&newer).unwrap(), "\"QUOTA_EXCEEDED\"");
    }
}
