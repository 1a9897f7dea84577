// Plain node:http, no signal handling: SIGTERM ends the process at once.
import http from 'node:http';
import handler from './handler.cjs';

http.createServer(handler.handle).listen(handler.port, handler.host);
