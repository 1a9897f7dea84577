// The usual hand-written shutdown: server.close() on SIGTERM, exit when it has closed.
import http from 'node:http';
import handler from './handler.cjs';

const server = http.createServer(handler.handle).listen(handler.port, handler.host);
process.on('SIGTERM', () => {
	server.close(() => {
		process.exit(0);
	});
});
