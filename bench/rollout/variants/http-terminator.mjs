// http-terminator with its defaults: terminate() on SIGTERM, then exit.
import http from 'node:http';
import {createHttpTerminator} from 'http-terminator';
import handler from './handler.cjs';

const server = http.createServer(handler.handle).listen(handler.port, handler.host);
const terminator = createHttpTerminator({server});
process.on('SIGTERM', async () => {
	await terminator.terminate();
	process.exit(0);
});
