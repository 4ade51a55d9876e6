# frozen_string_literal: true

class SessiondStore
  VERSION = '0.1.0'
end
