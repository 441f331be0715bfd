//! `embedded-io-async` for TCP: [`TcpSocket`], [`TcpReader`] and [`TcpWriter`] implement
//! `Read` / `ReadReady` and `Write` / `WriteReady`, so code written against those traits (HTTP,
//! TLS, protocol crates) runs over zcnet unchanged.

use embedded_io_async::{ErrorKind, ErrorType, Read, ReadReady, Write, WriteReady};

use super::tcp::{TcpError, TcpReader, TcpSocket, TcpWriter};

impl embedded_io_async::Error for TcpError {
    fn kind(&self) -> ErrorKind {
        match self {
            TcpError::ConnectionReset => ErrorKind::ConnectionReset,
            TcpError::ConnectionRefused => ErrorKind::ConnectionRefused,
            TcpError::TimedOut => ErrorKind::TimedOut,
            TcpError::Aborted | TcpError::ShutDown => ErrorKind::ConnectionAborted,
            TcpError::InvalidState => ErrorKind::NotConnected,
            TcpError::Unaddressable => ErrorKind::AddrNotAvailable,
        }
    }
}

impl ErrorType for TcpSocket {
    type Error = TcpError;
}

impl ErrorType for TcpReader<'_> {
    type Error = TcpError;
}

impl ErrorType for TcpWriter<'_> {
    type Error = TcpError;
}

impl Read for TcpSocket {
    async fn read(&mut self, buf: &mut [u8]) -> Result<usize, TcpError> {
        TcpSocket::read(self, buf).await
    }
}

impl Read for TcpReader<'_> {
    async fn read(&mut self, buf: &mut [u8]) -> Result<usize, TcpError> {
        TcpReader::read(self, buf).await
    }
}

impl Write for TcpSocket {
    async fn write(&mut self, buf: &[u8]) -> Result<usize, TcpError> {
        TcpSocket::write(self, buf).await
    }

    async fn flush(&mut self) -> Result<(), TcpError> {
        TcpSocket::flush(self).await
    }
}

impl Write for TcpWriter<'_> {
    async fn write(&mut self, buf: &[u8]) -> Result<usize, TcpError> {
        TcpWriter::write(self, buf).await
    }

    async fn flush(&mut self) -> Result<(), TcpError> {
        TcpWriter::flush(self).await
    }
}

/// `true` when a `read` would not wait: data is buffered, or the stream ended or failed.
impl ReadReady for TcpSocket {
    fn read_ready(&mut self) -> Result<bool, TcpError> {
        Ok(self.conn.read_ready())
    }
}

/// `true` when a `read` would not wait: data is buffered, or the stream ended or failed.
impl ReadReady for TcpReader<'_> {
    fn read_ready(&mut self) -> Result<bool, TcpError> {
        Ok(self.conn.read_ready())
    }
}

/// `true` when a `write` would not wait: there is room in the send buffer, or writing fails at
/// once.
impl WriteReady for TcpSocket {
    fn write_ready(&mut self) -> Result<bool, TcpError> {
        Ok(self.conn.write_ready())
    }
}

/// `true` when a `write` would not wait: there is room in the send buffer, or writing fails at
/// once.
impl WriteReady for TcpWriter<'_> {
    fn write_ready(&mut self) -> Result<bool, TcpError> {
        Ok(self.conn.write_ready())
    }
}
