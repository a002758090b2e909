// Preloaded into test MCP servers (node --require) so that a server which listens on a bare
// port (server-everything's `app.listen(PORT)`) binds to 127.0.0.1 instead of every interface.
const net = require("net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const [port, ...rest] = args;
  const isPort =
    typeof port === "number" || (typeof port === "string" && /^\d+$/.test(port));
  if (isPort && typeof rest[0] !== "string") {
    return listen.call(this, Number(port), "127.0.0.1", ...rest);
  }
  return listen.apply(this, args);
};
