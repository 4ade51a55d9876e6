# frozen_string_literal: true

require_relative 'lib/sessiond_store/version'

Gem::Specification.new do |spec|
  spec.name = 'sessiond_store'
  spec.version = SessiondStore::VERSION
  spec.authors = ['The sessiond authors']
  spec.summary = 'SessionStore for the Ruby Claude Agent SDK backed by sessiond, the local transcript daemon'
  spec.description = 'SessiondStore keeps the Agent SDK\'s session transcripts in sessiond over its Unix socket: ' \
                     'durable, whole and ordered appends, summaries, resume, and a check that the socket is ' \
                     'served by the user\'s own daemon.'
  spec.homepage = 'https://github.com/sessiond/sessiond/tree/main/sdk/ruby'
  spec.required_ruby_version = '>= 3.0'
  spec.files = Dir[File.join(__dir__, 'lib', '**', '*.rb')].map { |f| f.delete_prefix("#{__dir__}/") } + ['README.md']
  spec.require_paths = ['lib']

  spec.add_dependency 'grpc', '>= 1.51'
  # lib/sessiond_store/gen holds protoc 3.21's Ruby output (the
  # DescriptorPool DSL), which google-protobuf 4.26 and later no longer load.
  spec.add_dependency 'google-protobuf', '>= 3.21', '< 4.26'
  # google/rpc/status_pb and error_details_pb, for sessiond's ErrorInfo.
  spec.add_dependency 'googleapis-common-protos-types', '>= 1.4'
  # The Agent SDK is not a dependency: the store uses its summary fold when
  # it is there, and says so once when it is not.
end
