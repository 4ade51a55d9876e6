# frozen_string_literal: true

# A stand-in for the mcp gem, which the Ruby Agent SDK's top file requires
# and Debian does not package. Only the tests put it on the load path, last.
# Every use of an MCP constant raises: the SessionStore paths never use MCP,
# so a test that reaches it fails rather than passing on a fake.
module MCP
  def self.const_missing(name)
    raise NotImplementedError, "MCP::#{name}: mcp is a stand-in in sdk/ruby's tests (Debian has no mcp gem)"
  end
end
