//! An answer and its body, read up to a limit while it streams: a `Content-Length` over the limit
//! is refused before anything is read, and a body without one is stopped at the frame that would
//! cross it. Nothing over the limit is ever held in memory.

use http_body_util::BodyExt;
use hyper::StatusCode;
use hyper::body::{Body, Bytes, Incoming};
use hyper::header::{self, HeaderMap};

use crate::error::Error;

/// An answer whose head has arrived and whose body is not read yet: read it with
/// [`Answer::read`] or [`Answer::read_cut`], or drop it.
#[derive(Debug)]
pub struct Answer {
    /// The status.
    pub status: StatusCode,
    /// The headers.
    pub headers: HeaderMap,
    body: Incoming,
    /// The answer to a `HEAD`, whose `Content-Length` describes a body that is not sent.
    head: bool,
}

/// A whole answer: status, headers and body.
#[derive(Debug, Clone)]
pub struct Response {
    /// The status.
    pub status: StatusCode,
    /// The headers.
    pub headers: HeaderMap,
    /// The body, at most the limit it was read with.
    pub body: Vec<u8>,
}

impl Answer {
    pub(crate) fn new(response: hyper::Response<Incoming>, head: bool) -> Answer {
        let (parts, body) = response.into_parts();
        Answer {
            status: parts.status,
            headers: parts.headers,
            body,
            head,
        }
    }

    /// The whole answer, its body at most `limit` bytes ([`Error::TooLarge`] if larger).
    pub async fn read(self, limit: u64) -> Result<Response, Error> {
        let declared = self.declared_length();
        match bounded(self.body, declared, limit).await.map_err(Error::Body)? {
            Bounded::Whole(body) => Ok(Response {
                status: self.status,
                headers: self.headers,
                body,
            }),
            Bounded::Over(_) => Err(Error::TooLarge { limit }),
        }
    }

    /// The whole answer with its body cut at `limit` bytes: for answers read only to show
    /// something of them (an error's explanation). A body that says it is larger is not read at all
    /// (empty); one that turns out larger keeps the frames read before the limit.
    pub async fn read_cut(self, limit: u64) -> Result<Response, Error> {
        let declared = self.declared_length();
        let body = match bounded(self.body, declared, limit).await.map_err(Error::Body)? {
            Bounded::Whole(body) | Bounded::Over(body) => body,
        };
        Ok(Response {
            status: self.status,
            headers: self.headers,
            body,
        })
    }

    /// The next piece of a body read as it streams (a followed log, server-sent events); `None` at
    /// its end. The caller bounds what it keeps.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, Error> {
        while let Some(frame) = self.body.frame().await {
            if let Ok(data) = frame.map_err(Error::Body)?.into_data() {
                return Ok(Some(data));
            }
        }
        Ok(None)
    }

    /// The `Content-Length`, unless this answers a `HEAD`.
    fn declared_length(&self) -> Option<u64> {
        if self.head {
            return None;
        }
        self.headers
            .get(header::CONTENT_LENGTH)
            .and_then(|l| l.to_str().ok())
            .and_then(|l| l.parse::<u64>().ok())
    }
}

/// What reading a body up to a limit found.
#[derive(Debug, PartialEq, Eq)]
enum Bounded {
    /// The whole body, within the limit.
    Whole(Vec<u8>),
    /// The body is larger: what was read before the frame that crossed the limit (nothing when the
    /// declared length said so).
    Over(Vec<u8>),
}

/// Read `body` up to `limit` bytes; `declared` is its `Content-Length`, if trusted.
async fn bounded<B>(mut body: B, declared: Option<u64>, limit: u64) -> Result<Bounded, B::Error>
where
    B: Body<Data = Bytes> + Unpin,
{
    if declared.is_some_and(|length| length > limit) {
        return Ok(Bounded::Over(Vec::new()));
    }
    let mut bytes = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            if (bytes.len() + data.len()) as u64 > limit {
                return Ok(Bounded::Over(bytes));
            }
            bytes.extend_from_slice(&data);
        }
    }
    Ok(Bounded::Whole(bytes))
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::convert::Infallible;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use hyper::body::Frame;

    use super::*;

    /// A body of the given chunks, one frame each, counting the frames taken.
    struct Chunks {
        left: VecDeque<&'static [u8]>,
        taken: usize,
    }

    fn chunks(parts: &[&'static [u8]]) -> Chunks {
        Chunks {
            left: parts.iter().copied().collect(),
            taken: 0,
        }
    }

    impl Body for Chunks {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            let next = self.left.pop_front();
            if next.is_some() {
                self.taken += 1;
            }
            Poll::Ready(next.map(|c| Ok(Frame::data(Bytes::from_static(c)))))
        }
    }

    async fn read(body: &mut Chunks, declared: Option<u64>, limit: u64) -> Bounded {
        match bounded(body, declared, limit).await {
            Ok(b) => b,
            Err(never) => match never {},
        }
    }

    #[tokio::test]
    async fn a_body_up_to_the_limit_is_read_whole() {
        assert_eq!(
            read(&mut chunks(&[b"ab", b"cd"]), None, 4).await,
            Bounded::Whole(b"abcd".to_vec())
        );
        assert_eq!(
            read(&mut chunks(&[b"ab", b"cd"]), Some(4), 4).await,
            Bounded::Whole(b"abcd".to_vec())
        );
        assert_eq!(read(&mut chunks(&[]), None, 0).await, Bounded::Whole(Vec::new()));
    }

    #[tokio::test]
    async fn a_body_over_the_limit_stops_at_the_frame_that_crosses_it() {
        let mut body = chunks(&[b"ab", b"cd", b"ef", b"gh"]);
        assert_eq!(read(&mut body, None, 5).await, Bounded::Over(b"abcd".to_vec()));
        assert_eq!(body.taken, 3, "nothing is read after the frame that crossed the limit");
    }

    #[tokio::test]
    async fn a_declared_length_over_the_limit_reads_nothing() {
        let mut body = chunks(&[b"ab"]);
        assert_eq!(read(&mut body, Some(5), 4).await, Bounded::Over(Vec::new()));
        assert_eq!(body.taken, 0);
        // A declared length is not trusted to be small: the bytes are counted all the same.
        assert_eq!(
            read(&mut chunks(&[b"abc", b"def"]), Some(2), 4).await,
            Bounded::Over(b"abc".to_vec())
        );
    }
}
