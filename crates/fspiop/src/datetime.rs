//! FSPIOP `DateTime`: `YYYY-MM-DDTHH:MM:SS.sss` then `Z` or `±HH:MM`,
//! converted to and from milliseconds since the Unix epoch by hand.

const MS_PER_DAY: i64 = 86_400_000;

fn is_leap_year(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap_year(year) => 29,
        2 => 28,
        _ => 0,
    }
}

/// Days from 1970-01-01 to the given proleptic Gregorian date
/// (H. Hinnant's `days_from_civil`). `month` is 1-12, `day` 1-31.
pub(crate) fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400; // 0..=399
    let month_from_march = i64::from((month + 9) % 12); // March = 0
    let day_of_year = (153 * month_from_march + 2) / 5 + i64::from(day) - 1; // 0..=365
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The inverse of [`days_from_civil`]: (year, month 1-12, day 1-31).
pub(crate) fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097; // 0..=146096
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `count` ASCII digits at `at`, as a number.
fn digits(bytes: &[u8], at: usize, count: usize) -> Option<u32> {
    let mut value = 0u32;
    for &byte in bytes.get(at..at + count)? {
        if !byte.is_ascii_digit() {
            return None;
        }
        value = value * 10 + u32::from(byte - b'0');
    }
    Some(value)
}

/// True when `text` is FSPIOP's `Date` (`YYYY-MM-DD`, e.g. a
/// `dateOfBirth`): a year 1000-9999 and a real calendar date.
pub(crate) fn is_date(text: &str) -> bool {
    let b = text.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let (Some(year), Some(month), Some(day)) = (digits(b, 0, 4), digits(b, 5, 2), digits(b, 8, 2))
    else {
        return false;
    };
    let year = i64::from(year);
    year >= 1000 && (1..=12).contains(&month) && day >= 1 && day <= days_in_month(year, month)
}

/// Parses FSPIOP's `DateTime` to milliseconds since the Unix epoch (UTC).
///
/// Exactly the v1.1 schema's pattern: a year 1000-9999, a real calendar
/// date (month lengths, Gregorian leap years), hours 00-23, minutes and
/// seconds 00-59, exactly three decimals, then `Z` or an offset `±HH:MM`
/// whose hours are 00-19. Anything else is `None`.
pub fn parse_date_time(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    // YYYY-MM-DDTHH:MM:SS.sss = 23 bytes, then "Z" (24) or "+HH:MM" (29).
    if b.len() != 24 && b.len() != 29 {
        return None;
    }
    if b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || b[19] != b'.'
    {
        return None;
    }
    let year = digits(b, 0, 4)?;
    let month = digits(b, 5, 2)?;
    let day = digits(b, 8, 2)?;
    let hour = digits(b, 11, 2)?;
    let minute = digits(b, 14, 2)?;
    let second = digits(b, 17, 2)?;
    let millis = digits(b, 20, 3)?;
    let year = i64::from(year);
    if year < 1000
        || !(1..=12).contains(&month)
        || day == 0
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let offset_ms = match b[23] {
        b'Z' if b.len() == 24 => 0,
        sign @ (b'+' | b'-') if b.len() == 29 => {
            if b[26] != b':' {
                return None;
            }
            let offset_hours = digits(b, 24, 2)?;
            let offset_minutes = digits(b, 27, 2)?;
            if offset_hours > 19 || offset_minutes > 59 {
                return None;
            }
            let magnitude = i64::from(offset_hours * 60 + offset_minutes) * 60_000;
            if sign == b'+' {
                magnitude
            } else {
                -magnitude
            }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let time_ms = i64::from(((hour * 60 + minute) * 60 + second) * 1000 + millis);
    // Local time = UTC + offset.
    Some(days * MS_PER_DAY + time_ms - offset_ms)
}

fn push_2(out: &mut String, value: u32) {
    out.push(char::from(b'0' + (value / 10 % 10) as u8));
    out.push(char::from(b'0' + (value % 10) as u8));
}

/// Formats milliseconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SS.sssZ`.
///
/// Instants in years 1000-9999 give a valid FSPIOP `DateTime`; others are
/// still written (year padded to four digits, or longer, or signed), never
/// a panic.
pub fn format_date_time(ms: i64) -> String {
    let days = ms.div_euclid(MS_PER_DAY);
    let time_ms = ms.rem_euclid(MS_PER_DAY) as u32;
    let (year, month, day) = civil_from_days(days);
    let mut out = String::with_capacity(24);
    if (0..=9999).contains(&year) {
        let year = year as u32;
        push_2(&mut out, year / 100);
        push_2(&mut out, year % 100);
    } else {
        out.push_str(&format!("{year:04}"));
    }
    out.push('-');
    push_2(&mut out, month);
    out.push('-');
    push_2(&mut out, day);
    out.push('T');
    push_2(&mut out, time_ms / 3_600_000);
    out.push(':');
    push_2(&mut out, time_ms / 60_000 % 60);
    out.push(':');
    push_2(&mut out, time_ms / 1000 % 60);
    out.push('.');
    let millis = time_ms % 1000;
    out.push(char::from(b'0' + (millis / 100) as u8));
    push_2(&mut out, millis % 100);
    out.push('Z');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants() {
        assert_eq!(parse_date_time("1970-01-01T00:00:00.000Z"), Some(0));
        assert_eq!(
            parse_date_time("2000-03-01T00:00:00.000Z"),
            Some(951_868_800_000)
        );
        assert_eq!(
            parse_date_time("2016-05-24T08:38:08.699Z"),
            Some(1_464_079_088_699)
        );
        assert_eq!(
            parse_date_time("2016-05-24T08:38:08.699-04:00"),
            Some(1_464_079_088_699 + 4 * 3_600_000)
        );
        assert_eq!(
            parse_date_time("2016-05-24T08:38:08.699+05:30"),
            Some(1_464_079_088_699 - 330 * 60_000)
        );
        assert_eq!(
            parse_date_time("2016-05-24T08:38:08.699+00:00"),
            Some(1_464_079_088_699)
        );
        assert_eq!(parse_date_time("1969-12-31T23:59:59.999Z"), Some(-1));
        assert_eq!(format_date_time(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_date_time(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(
            format_date_time(1_464_079_088_699),
            "2016-05-24T08:38:08.699Z"
        );
        assert_eq!(
            format_date_time(1_464_079_088_009),
            "2016-05-24T08:38:08.009Z"
        );
    }

    #[test]
    fn leap_days() {
        assert!(parse_date_time("2024-02-29T12:00:00.000Z").is_some());
        assert!(parse_date_time("2000-02-29T12:00:00.000Z").is_some());
        assert!(parse_date_time("2023-02-29T12:00:00.000Z").is_none());
        assert!(parse_date_time("2100-02-29T12:00:00.000Z").is_none());
        assert!(parse_date_time("1900-02-29T12:00:00.000Z").is_none());
        assert!(parse_date_time("2023-02-28T12:00:00.000Z").is_some());
        assert_eq!(
            parse_date_time("2024-03-01T00:00:00.000Z").unwrap()
                - parse_date_time("2024-02-29T00:00:00.000Z").unwrap(),
            MS_PER_DAY
        );
    }

    #[test]
    fn month_lengths() {
        for (text, ok) in [
            ("2023-01-31", true),
            ("2023-04-31", false),
            ("2023-04-30", true),
            ("2023-06-31", false),
            ("2023-09-31", false),
            ("2023-11-31", false),
            ("2023-12-31", true),
            ("2023-13-01", false),
            ("2023-00-10", false),
            ("2023-05-00", false),
            ("2023-05-32", false),
        ] {
            let full = format!("{text}T00:00:00.000Z");
            assert_eq!(parse_date_time(&full).is_some(), ok, "{full}");
        }
    }

    #[test]
    fn rejects_everything_off_pattern() {
        for text in [
            "",
            "2016-05-24T08:38:08Z",
            "2016-05-24T08:38:08.69Z",
            "2016-05-24T08:38:08.6999Z",
            "2016-05-24T08:38:08.699",
            "2016-05-24 08:38:08.699Z",
            "2016-05-24t08:38:08.699Z",
            "2016-05-24T08:38:08.699z",
            "2016-05-24T24:00:00.000Z",
            "2016-05-24T23:60:00.000Z",
            "2016-05-24T23:59:60.000Z",
            "0999-05-24T08:38:08.699Z",
            "+2016-05-24T08:38:08.699Z",
            "2016-05-24T08:38:08.699+0400",
            "2016-05-24T08:38:08.699+04",
            "2016-05-24T08:38:08.699+20:00",
            "2016-05-24T08:38:08.699+04:60",
            "2016-05-24T08:38:08.699Z+04:00",
            "2016-05-24T08:38:08.699*04:00",
            "2016-5-24T08:38:08.699Z",
            "2016-05-24T08:38:08.6a9Z",
            "2016-05-24T08:38:08.699-4:000",
            "२०१६-05-24T08:38:08.699Z",
        ] {
            assert_eq!(parse_date_time(text), None, "{text}");
        }
        assert!(parse_date_time("1000-01-01T00:00:00.000Z").is_some());
        assert!(parse_date_time("9999-12-31T23:59:59.999Z").is_some());
        assert!(parse_date_time("2016-05-24T08:38:08.699+19:59").is_some());
        assert!(parse_date_time("2016-05-24T08:38:08.699-19:59").is_some());
    }

    #[test]
    fn every_day_from_1000_to_9999_matches_a_naive_calendar() {
        let mut days = days_from_civil(1000, 1, 1);
        for year in 1000..=9999i64 {
            for month in 1..=12 {
                for day in 1..=days_in_month(year, month) {
                    assert_eq!(
                        days_from_civil(year, month, day),
                        days,
                        "{year}-{month}-{day}"
                    );
                    assert_eq!(civil_from_days(days), (year, month, day));
                    days += 1;
                }
            }
        }
        assert_eq!(days_from_civil(1970, 1, 1), 0);
    }

    #[test]
    fn round_trips() {
        let samples = [
            0i64,
            1,
            999,
            86_399_999,
            951_782_400_000,   // 2000-02-29
            1_709_164_800_123, // 2024-02-29
            4_102_444_800_000, // 2100-01-01
            parse_date_time("1000-01-01T00:00:00.000Z").unwrap(),
            parse_date_time("9999-12-31T23:59:59.999Z").unwrap(),
            -1,
            -86_400_001,
        ];
        for ms in samples {
            let text = format_date_time(ms);
            assert_eq!(parse_date_time(&text), Some(ms), "{text}");
        }
        // A pseudo-random sweep over the whole valid range.
        let low = parse_date_time("1000-01-01T00:00:00.000Z").unwrap();
        let high = parse_date_time("9999-12-31T23:59:59.999Z").unwrap();
        let span = (high - low) as u64;
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let ms = low + (state % span) as i64;
            let text = format_date_time(ms);
            assert_eq!(parse_date_time(&text), Some(ms), "{text}");
        }
    }

    #[test]
    fn offsets_round_trip_through_utc() {
        let utc = parse_date_time("2024-01-01T00:30:00.000Z").unwrap();
        assert_eq!(parse_date_time("2023-12-31T23:30:00.000-01:00"), Some(utc));
        assert_eq!(parse_date_time("2024-01-01T02:00:00.000+01:30"), Some(utc));
        assert_eq!(
            format_date_time(parse_date_time("2024-03-01T01:00:00.000+02:00").unwrap()),
            "2024-02-29T23:00:00.000Z"
        );
    }

    #[test]
    fn formatting_never_panics_at_the_extremes() {
        for ms in [i64::MIN, i64::MAX, i64::MIN + 1, -62_135_596_800_000 - 1] {
            let text = format_date_time(ms);
            assert!(text.ends_with('Z'), "{text}");
            assert_eq!(parse_date_time(&text), None, "{text}");
        }
        assert_eq!(
            format_date_time(-62_135_596_800_000),
            "0001-01-01T00:00:00.000Z"
        );
    }
}
