package transcript

// ChainType is the type of an entry that is a link of the parentUuid chain
// the official readers follow (user, assistant, system, attachment and
// progress entries), or TypeOther for every other entry.
type ChainType uint8

// The chain types; TypeOther is the zero value.
const (
	TypeOther ChainType = iota
	TypeUser
	TypeAssistant
	TypeSystem
	TypeAttachment
	TypeProgress
)

var chainTypes = map[string]ChainType{
	"user": TypeUser, "assistant": TypeAssistant, "system": TypeSystem,
	"attachment": TypeAttachment, "progress": TypeProgress,
}

// ChainTypeOf returns the chain type of an entry whose "type" is typ.
func ChainTypeOf(typ string) ChainType { return chainTypes[typ] }
